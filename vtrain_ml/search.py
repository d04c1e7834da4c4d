"""`python -m vtrain_ml.search`: see vtrain_ml.cli.search."""

from vtrain_ml.cli.search import main

if __name__ == "__main__":
    raise SystemExit(main())
