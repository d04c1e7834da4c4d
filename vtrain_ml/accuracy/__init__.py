"""Accuracy against measured training runs: read measurements, validate, calibrate."""
