"""`python -m vtrain_ml.search` and the console script `vtrain-search`: see vtrain_ml.cli.search.

The search needs the `surrogate` extra (Optuna, XGBoost), which its module imports at once; this
launcher imports it late, so that without the extra even `--help` says what to install instead of
a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

from vtrain_ml.cli.common import report_missing_extra


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from vtrain_ml.cli.search import main as search_main
    except ModuleNotFoundError as exc:
        return report_missing_extra(exc, "vtrain-search")
    return search_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
