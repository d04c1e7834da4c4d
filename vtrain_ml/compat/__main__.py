"""`python -m vtrain_ml.compat -c config.json`: vTrain's example.py (see vtrain_ml.compat.vtrain)."""

from vtrain_ml.compat.vtrain import main

if __name__ == "__main__":
    raise SystemExit(main())
