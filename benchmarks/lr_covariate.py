"""The base LR as a shape covariate of the empirical curve, on the recorded CPU sweeps: the
held-out evaluation (``hpo eval-predictor``) of each source with the covariate (the product)
and without it (every LR of a tau pooled into one curve). The four shared sources record no
base LR, so the covariate does not apply to them.

    python benchmarks/lr_covariate.py > benchmarks/results/lr_covariate.txt
"""

from __future__ import annotations

import contextlib
import io

import hpo.predictors.curves as curves
from hpo.cli import main

#: (curve file, proxies: runs with n_params at most this)
SOURCES = (
    ("benchmarks/data/quickstart_family.csv.gz", "50000"),
    ("benchmarks/data/cpu_sweep.csv.gz", "30000"),
    ("benchmarks/data/cpu_sweep_w64.csv.gz", "90000"),
)


def _evaluate(path: str, proxy_max: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["eval-predictor", path, "--proxy-max-params", proxy_max,
              "--at", "0.2,0.3"])
    text = out.getvalue().split("== median over")[0]
    return "\n".join(line for line in text.splitlines()
                     if line.startswith(("==", "--", "method", "collapse ", "last_value ")))


def main_() -> None:
    with_lr = curves.shape_covariates

    def without_lr(controls, split_tpp=True, lr=False):  # noqa: ANN001, ANN202
        return with_lr(controls, split_tpp=split_tpp, lr=False)

    for path, proxy_max in SOURCES:
        for name, fn in (("with the base LR (the product)", with_lr),
                         ("without it", without_lr)):
            curves.shape_covariates = fn
            print(f"# {path}: {name}")
            print(_evaluate(path, proxy_max), end="\n\n")
    curves.shape_covariates = with_lr


if __name__ == "__main__":
    main_()
