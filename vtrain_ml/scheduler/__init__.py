"""Deadline-aware scheduling of many training jobs on a shared GPU cluster (case study 2)."""
