"""`python -m vtrain_ml.simulate`: see vtrain_ml.cli.simulate."""

from vtrain_ml.cli.simulate import main

if __name__ == "__main__":
    raise SystemExit(main())
