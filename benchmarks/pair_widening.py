"""``hpo`` with the pair law's extrapolation widening set to K (the candidates of
``benchmarks/choose_threshold.py``): ``python benchmarks/pair_widening.py K bench ARGS...``."""

from __future__ import annotations

import sys

import hpo.predictors.predict as predict
from hpo.cli import main

if __name__ == "__main__":
    predict.PAIR_WIDENING = float(sys.argv[1])
    raise SystemExit(main(sys.argv[2:]))
