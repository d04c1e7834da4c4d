"""Command-line entry points; `python -m vtrain_ml.<name>` shims call `main` here."""
