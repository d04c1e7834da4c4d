"""`python -m vtrain_ml.schedule`: see vtrain_ml.cli.schedule (the engine is vtrain_ml.scheduler)."""

from vtrain_ml.cli.schedule import main

if __name__ == "__main__":
    raise SystemExit(main())
