"""``benchmarks/gpu.py``, the one-shot GPU check: its plan, its inputs and its report, checked
without a GPU (the script itself runs every stage at toy sizes with ``--smoke --device cpu``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu
from hpo.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("fam", [gpu.GPU_FAMILY, gpu.SMOKE_FAMILY])
def test_family_plan_has_the_sweep_its_proxies_and_the_collapse_family(fam: gpu.Family) -> None:
    runs = gpu.family_runs(fam)
    names = [r.name for r in runs]
    assert len(set(names)) == len(names)
    grid = len(fam.lrs) * len(fam.taus)
    # the target sweep first (its runs are the longest), every setting at every proxy width
    assert {r.width for r in runs[:grid]} == {fam.target_width}
    for width in (fam.target_width, *fam.proxy_widths):
        assert sum(r.width == width and r.seed == 0 for r in runs) == grid
    # the middle setting at every width (the collapse family) and the smallest width's seeds
    lr, tau = fam.middle
    widths = {r.width for r in runs if (r.lr, r.tau, r.seed) == (lr, tau, 0)}
    assert widths == {*fam.proxy_widths, fam.extra_width, fam.target_width}
    seeds = {r.seed for r in runs if r.width == min(fam.proxy_widths)}
    assert seeds == set(range(fam.seeds))
    # proxies are smaller than every other family member, so --proxy-max-params splits them
    sizes = {w: gpu._plan(fam, w)[0] for w in widths}
    assert max(sizes[w] for w in fam.proxy_widths) < min(
        sizes[w] for w in (fam.extra_width, fam.target_width))


def test_every_family_run_is_a_valid_hpo_train_command(tmp_path: Path) -> None:
    parser = build_parser()
    for run in gpu.family_runs(gpu.GPU_FAMILY):
        argv = gpu.train_argv(gpu.GPU_FAMILY, run, tmp_path / f"{run.name}.csv", "cuda", 0)
        assert argv[1:4] == ["-m", "hpo", "train"]
        args = parser.parse_args(argv[3:])
        assert (args.width, args.lr, args.tau, args.seed) == (run.width, run.lr, run.tau,
                                                              run.seed)
        assert args.run_id == run.name and args.device == "cuda"


def test_pair_tokens_have_exactly_the_padded_gpt2_vocabulary(tmp_path: Path) -> None:
    from hpo.models import load_tokens

    folder = gpu.write_pair_tokens(tmp_path / "tokens", max_bytes=100_000)
    data = load_tokens(folder)
    assert data.vocab_size == gpu.VOCAB == 50304
    # two bytes a token (each split of an odd length drops its last byte)
    assert 49_999 <= data.train.numel() + data.val.numel() <= 50_000 and data.val.numel() > 0


def test_report_renders_partial_and_complete_results() -> None:
    row = {"shape": "124M", "width": 768, "depth": 12, "heads": 12, "context": 1024,
           "batch_tokens": 16384, "n_params": 124e6, "ratio": 0.97,
           "ours": {"tokens_per_s": 9.7e5, "mfu": 0.52}, "plain": {"tokens_per_s": 1e6,
                                                                     "mfu": 0.536}}
    failed = {**row, "shape": "350M", "ours": None}
    del failed["ratio"]
    results = {"seconds": {"env": 3, "throughput": 120},
               "env": {"device": "cuda", "device_name": "NVIDIA H200", "torch": "2.11",
                       "python": "3.12", "peak_tflops": 989.0, "matmul_bf16_tflops": 790.0},
               "throughput": {"rows": [row, failed], "compile": True, "bf16": True,
                              "peak_tflops": 989.0}}
    text = gpu.render(results, "python benchmarks/gpu.py OUT")
    assert "| 124M (d 768, L 12, ctx 1024) | 124M | 16,384 | 970,000 | 1,000,000 | 0.970 " \
           "| 52.0% | 53.6% |" in text
    assert "| 350M" in text and "790 TFLOP/s" in text and "total 123" in text
    results["analysis"] = {"error": "no curves at OUT/gpu_sweep.csv.gz"}
    assert "no curves at" in gpu.render(results, "x")


def test_bad_stage_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "benchmarks/gpu.py", str(tmp_path), "--stages",
                           "env,compile"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--stages must name stages of env, throughput, family, analysis, but got compile" \
        in proc.stderr
    assert not (tmp_path / "gpu.json").exists()


def test_env_stage_on_the_cpu_writes_the_report(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "benchmarks/gpu.py", str(tmp_path), "--stages", "env",
                           "--device", "cpu", "--smoke"], cwd=REPO, capture_output=True,
                          text=True, check=True)
    got = json.loads((tmp_path / "gpu.json").read_text())
    assert got["env"]["device"] == "cpu" and "env" in got["seconds"]
    assert (tmp_path / "gpu.md").read_text().startswith("# The GPU check")
    assert "Seconds per stage: env" in proc.stdout
