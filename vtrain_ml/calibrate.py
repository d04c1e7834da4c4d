"""`python -m vtrain_ml.calibrate`: see vtrain_ml.cli.calibrate."""

from vtrain_ml.cli.calibrate import main

if __name__ == "__main__":
    raise SystemExit(main())
