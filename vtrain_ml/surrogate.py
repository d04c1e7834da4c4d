"""`python -m vtrain_ml.surrogate`: see vtrain_ml.cli.surrogate."""

from vtrain_ml.cli.surrogate import main

if __name__ == "__main__":
    raise SystemExit(main())
