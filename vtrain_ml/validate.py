"""`python -m vtrain_ml.validate`: see vtrain_ml.cli.validate."""

from vtrain_ml.cli.validate import main

if __name__ == "__main__":
    raise SystemExit(main())
