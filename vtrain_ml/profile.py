"""`python -m vtrain_ml.profile`: see vtrain_ml.cli.profile."""

from vtrain_ml.cli.profile import main

if __name__ == "__main__":
    raise SystemExit(main())
