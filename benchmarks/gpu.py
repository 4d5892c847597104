"""The GPU check, in one script: throughput against plain PyTorch, a collapse family, and a pruned
sweep against the full one, written to one folder.

Stages (``--stages``, all by default, in this order):

1. ``env``: the device, torch, and the bf16 matmul rate it reaches (8192^3, the ceiling beside the
   datasheet peak used for MFU).
2. ``throughput``: ``benchmarks/throughput.py`` at a 124M-class shape (d 768, L 12, 12 heads,
   context 1024) and a 350M-class shape (d 1024, L 24, 16 heads), bf16, compiled, our loop and a
   plain PyTorch GPT of the same shape. The four processes start at once, so they compile side by
   side, wait until all have compiled, and then each holds an exclusive lock for its steps, so no
   two time at once and none times while another compiles. The tokens are the standard
   library's byte pairs folded into GPT-2's vocabulary padded to 50,304 (as nanoGPT pads it), so
   both shapes carry a GPT-2-sized embedding and head; the content does not change the speed.
3. ``family``: ``hpo train`` runs of one CompleteP family (depth 4, context 256, squared ReLU,
   base width 64, TPP 20, batch 16,384 tokens, linear decay to zero, the standard library's
   bytes): an LR x tau sweep at the target width, the same settings at two proxy widths, one more
   width at the middle setting, and two more seeds of the smallest width, ``--jobs`` at once on
   the one GPU (small models leave it mostly idle). Runs still going at the stage's deadline are
   killed and left out. All curves go to ``gpu_sweep.csv.gz`` in the curve format.
4. ``analysis`` (CPU only; needs optuna): the collapse spread of the family's normalized curves
   over t^ in [0.2, 1] beside the seed-to-seed spread (``hpo.predictors.collapse_report``); the
   sweep replayed through the default ``CollapsePruner`` and Optuna's pruners (``hpo bench``,
   proxies = the two proxy widths), for compute saved and whether the best arm was kept; and the
   final-loss prediction errors from 10%, 20% and 30% of each target (``hpo eval-predictor``).

Writes ``gpu.md`` (the tables), ``gpu.json`` (everything measured) and ``gpu_sweep.csv.gz`` to
OUT, rewriting the first two after every stage so an interrupted run keeps what it measured.

    python benchmarks/gpu.py OUT                           # on the GPU: about 6 minutes
    python benchmarks/gpu.py OUT --stages analysis         # the tables again from OUT's curves
    python benchmarks/gpu.py OUT --smoke --device cpu      # every stage at toy sizes on a CPU
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("env", "throughput", "family", "analysis")
PEAK_TFLOPS = 989.0  # H200 SXM dense bf16, NVIDIA's datasheet (the H100's figure)
VOCAB = 50304  # GPT-2's 50,257 tokens padded to a multiple of 64


@dataclass(frozen=True)
class Shape:
    """One throughput shape."""

    name: str
    width: int
    depth: int
    heads: int
    context: int
    batch_tokens: int


@dataclass(frozen=True)
class Family:
    """The collapse family and its sweep."""

    depth: int
    heads: int
    context: int
    base_width: int
    tpp: float
    batch_tokens: int
    target_width: int
    proxy_widths: tuple[int, ...]
    extra_width: int  # one more family member, at the middle setting only
    lrs: tuple[float, ...]
    taus: tuple[float, ...]
    seeds: int  # seeds of the smallest width at the middle setting

    @property
    def middle(self) -> tuple[float, float]:
        return self.lrs[len(self.lrs) // 2], self.taus[len(self.taus) // 2]


@dataclass(frozen=True)
class Run:
    """One ``hpo train`` run of the family."""

    width: int
    lr: float
    tau: float
    seed: int

    @property
    def name(self) -> str:
        return f"w{self.width}-lr{self.lr:g}-tau{self.tau:g}-s{self.seed}"


GPU_SHAPES = (Shape("124M", 768, 12, 12, 1024, 16384), Shape("350M", 1024, 24, 16, 1024, 16384))
SMOKE_SHAPES = (Shape("toy-a", 64, 2, 4, 64, 1024), Shape("toy-b", 96, 3, 4, 64, 1024))
GPU_FAMILY = Family(depth=4, heads=4, context=256, base_width=64, tpp=20.0, batch_tokens=16384,
                    target_width=256, proxy_widths=(64, 128), extra_width=192,
                    lrs=(0.003, 0.01, 0.03), taus=(0.1, 0.2, 0.4), seeds=3)
SMOKE_FAMILY = Family(depth=2, heads=2, context=32, base_width=16, tpp=2.0, batch_tokens=256,
                      target_width=32, proxy_widths=(16, 24), extra_width=28,
                      lrs=(0.01, 0.03), taus=(0.1, 0.2), seeds=2)


# ---- plumbing -----------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    """The environment for child processes: unbuffered output, one OpenMP thread each."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Pool:
    """At most ``jobs`` processes at once, each with its log file; those still running at the
    deadline (seconds from :meth:`run`) are killed."""

    def __init__(self, jobs: int, deadline: float) -> None:
        self.jobs, self.deadline = jobs, deadline

    def run(self, tasks: list[tuple[str, list[str], Path]]) -> dict[str, int | None]:
        """Run ``(name, argv, log)`` tasks in order; return each name's exit code (``None``:
        killed at the deadline or never started)."""
        pending = list(tasks)
        running: list[tuple[str, subprocess.Popen, float, Path]] = []
        codes: dict[str, int | None] = {name: None for name, _, _ in tasks}
        t0 = time.time()
        while pending or running:
            while pending and len(running) < self.jobs:
                name, argv, log = pending.pop(0)
                with open(log, "w") as fh:
                    proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                            env=_env(), cwd=REPO)
                running.append((name, proc, time.time(), log))
            time.sleep(0.2)
            for item in list(running):
                name, proc, started, log = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                codes[name] = proc.returncode
                tail = log.read_text(errors="replace").strip().splitlines()[-1:]
                _log(f"{name}: exit {proc.returncode} in {time.time() - started:.0f}s "
                     f"{' '.join(tail)[:200]}")
            if time.time() - t0 > self.deadline:
                for name, proc, _, _ in running:
                    proc.kill()
                    proc.wait()
                    _log(f"{name}: killed at the stage deadline ({self.deadline:.0f}s)")
                for name, _, _ in pending:
                    _log(f"{name}: not started before the stage deadline")
                break
        return codes


# ---- stages -------------------------------------------------------------------------------------
def stage_env(args: argparse.Namespace) -> dict:
    import torch

    out: dict = {"torch": torch.__version__, "python": sys.version.split()[0],
                 "device": args.device, "peak_tflops": PEAK_TFLOPS}
    if args.device.startswith("cuda"):
        out["device_name"] = torch.cuda.get_device_name()
        n = 2048 if args.smoke else 8192
        a = torch.randn(n, n, device=args.device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=args.device, dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        out["matmul_bf16_tflops"] = 10 * 2 * n**3 / (time.perf_counter() - t0) / 1e12
        del a, b
        torch.cuda.empty_cache()  # the later stages' processes get the whole card
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=30)
            out["nvidia_smi"] = smi.stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            out["nvidia_smi"] = f"nvidia-smi: {type(exc).__name__}"
    return out


def write_pair_tokens(folder: Path, max_bytes: int | None) -> Path:
    """``train.bin`` / ``val.bin`` (uint16): the standard library's bytes read as pairs, each pair
    ``256 * a + b`` folded into ``VOCAB`` ids; the last val token is ``VOCAB - 1``, so the
    vocabulary is exactly ``VOCAB``."""
    import numpy as np

    from hpo.models import load_tokens

    data = load_tokens(None, max_bytes=max_bytes)
    folder.mkdir(parents=True, exist_ok=True)
    for split, stream in (("train", data.train), ("val", data.val)):
        raw = stream.numpy().astype(np.uint32)
        raw = raw[: raw.size // 2 * 2]
        ids = ((raw[0::2] << 8 | raw[1::2]) % VOCAB).astype(np.uint16)
        if split == "val":
            ids[-1] = VOCAB - 1
        ids.tofile(folder / f"{split}.bin")
    return folder


def stage_throughput(args: argparse.Namespace, work: Path) -> dict:
    shapes = SMOKE_SHAPES if args.smoke else GPU_SHAPES
    tokens = write_pair_tokens(work / "tokens", max_bytes=2**22 if args.smoke else None)
    lock = work / "throughput.lock"
    for stale in work.glob("throughput.lock.ready.*"):  # a reused --work folder's last run
        stale.unlink()
    tasks = []
    for shape, loop in itertools.product(shapes, ("ours", "plain")):
        name = f"{shape.name}-{loop}"
        argv = [sys.executable, "-m", "benchmarks.throughput", "--device", args.device,
                "--width", str(shape.width), "--depth", str(shape.depth),
                "--heads", str(shape.heads), "--context", str(shape.context),
                "--batch-tokens", str(shape.batch_tokens), "--data", str(tokens),
                "--loop", loop, "--repeats", "1", "--lock", str(lock),
                "--barrier", str(2 * len(shapes)),
                "--warmup-steps", str(args.throughput_warmup),
                "--steps", str(args.throughput_steps), "--peak-tflops", str(PEAK_TFLOPS),
                "--json", str(work / f"{name}.json")]
        if not args.no_compile:
            argv.append("--compile")
        tasks.append((name, argv, work / f"{name}.log"))
    codes = Pool(jobs=len(tasks), deadline=args.throughput_deadline).run(tasks)
    rows = []
    for shape in shapes:
        row: dict = {"shape": shape.name, **asdict(shape)}
        for loop in ("ours", "plain"):
            path = work / f"{shape.name}-{loop}.json"
            if codes[f"{shape.name}-{loop}"] != 0 or not path.exists():
                row[loop] = None
                continue
            got = json.loads(path.read_text())
            run = got["runs"][0]
            row.update(n_params=got["shape"]["n_params"], vocab=got["shape"]["vocab"],
                       flops_per_token=got["shape"]["flops_per_token"])
            row[loop] = {k: run.get(k) for k in ("tokens_per_s", "tokens_per_s_mean", "mfu",
                                                 "peak_memory_gib", "timed_steps")}
        if row.get("ours") and row.get("plain"):
            row["ratio"] = row["ours"]["tokens_per_s"] / row["plain"]["tokens_per_s"]
        rows.append(row)
    return {"rows": rows, "compile": not args.no_compile, "peak_tflops": PEAK_TFLOPS,
            "bf16": args.device.startswith("cuda"),
            "exit_codes": codes}


def family_runs(fam: Family) -> list[Run]:
    """Targets first (the longest), then the extra width, the proxies and the seeds."""
    grid = list(itertools.product(fam.lrs, fam.taus))
    lr, tau = fam.middle
    runs = [Run(fam.target_width, a, b, 0) for a, b in grid]
    runs.append(Run(fam.extra_width, lr, tau, 0))
    runs += [Run(w, a, b, 0) for w in sorted(fam.proxy_widths, reverse=True) for a, b in grid]
    runs += [Run(min(fam.proxy_widths), lr, tau, s) for s in range(1, fam.seeds)]
    return runs


def _plan(fam: Family, width: int) -> tuple[int, int]:
    """(N, T) of a family member of this width."""
    from hpo.models import GPTConfig, count_params, make_recipe

    cfg = GPTConfig(width=width, depth=fam.depth, heads=fam.heads, context=fam.context,
                    activation="relu2", base_width=fam.base_width, base_depth=fam.depth)
    n = count_params(cfg)
    recipe = make_recipe(n_params=n, tpp=fam.tpp, batch_tokens=fam.batch_tokens, lr=0.01,
                         tau=0.2, width_mult=cfg.width_mult, depth_mult=cfg.depth_mult)
    return n, recipe.total_steps


def train_argv(fam: Family, run: Run, out: Path, device: str, max_data_bytes: int) -> list[str]:
    _, total = _plan(fam, run.width)
    return [
        sys.executable, "-m", "hpo", "train", "--width", str(run.width),
        "--depth", str(fam.depth), "--heads", str(fam.heads), "--context", str(fam.context),
        "--activation", "relu2", "--base-width", str(fam.base_width),
        "--base-depth", str(fam.depth), "--tpp", str(fam.tpp), "--lr", str(run.lr),
        "--tau", str(run.tau), "--batch-tokens", str(fam.batch_tokens), "--schedule", "linear",
        "--seed", str(run.seed), "--log-every", str(max(1, total // 1000)),
        "--eval-every", str(max(1, total // 100)), "--eval-batches", "8",
        "--max-data-bytes", str(max_data_bytes), "--threads", "1", "--device", device,
        "--out", str(out), "--run-id", run.name,
    ]


def stage_family(args: argparse.Namespace, work: Path, out: Path) -> dict:
    import pandas as pd

    fam = SMOKE_FAMILY if args.smoke else GPU_FAMILY
    runs = family_runs(fam)
    tasks = []
    for run in runs:
        curve = work / f"{run.name}.csv"
        argv = train_argv(fam, run, curve, args.device, 2**22 if args.smoke else 0)
        tasks.append((run.name, argv, work / f"{run.name}.log"))
    plans = {w: _plan(fam, w) for w in {r.width for r in runs}}
    for w, (n, total) in sorted(plans.items()):
        _log(f"width {w}: N = {n:,}, T = {total:,} steps")
    codes = Pool(jobs=args.jobs, deadline=args.family_deadline).run(tasks)
    done = [run for run in runs if codes[run.name] == 0 and (work / f"{run.name}.csv").exists()]
    if done:
        frame = pd.concat([pd.read_csv(work / f"{r.name}.csv") for r in done], ignore_index=True)
        frame.to_csv(out / "gpu_sweep.csv.gz", index=False, compression="gzip")
    missing = [r.name for r in runs if r not in done]
    return {"family": asdict(fam), "runs": len(runs), "finished": len(done), "missing": missing,
            "plans": {str(w): {"n_params": n, "total_steps": t} for w, (n, t) in plans.items()}}


def _hpo_json(argv: list[str], json_path: Path, timeout: float) -> tuple[dict | None, str]:
    """Run ``python -m hpo ARGV --json JSON``; (its JSON or None, its stdout and stderr)."""
    proc = subprocess.run([sys.executable, "-m", "hpo", *argv, "--json", str(json_path)],
                          capture_output=True, text=True, env=_env(), cwd=REPO, timeout=timeout)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or not json_path.exists():
        return None, text
    return json.loads(json_path.read_text()), text


def stage_analysis(args: argparse.Namespace, work: Path, out: Path) -> dict:
    from hpo.predictors import collapse_report, read_curves, runs_from_frame

    fam = SMOKE_FAMILY if args.smoke else GPU_FAMILY
    curves = out / "gpu_sweep.csv.gz"
    if not curves.exists():
        return {"error": f"no curves at {curves}"}
    frame = read_curves([str(curves)])
    lr, tau = fam.middle
    widths = sorted({*fam.proxy_widths, fam.extra_width, fam.target_width})
    family_ids = [Run(w, lr, tau, 0).name for w in widths]
    seed_ids = [Run(min(fam.proxy_widths), lr, tau, s).name for s in range(fam.seeds)]
    result: dict = {}
    have = set(frame["run_id"])
    for split in ("train", "val"):
        fam_runs = runs_from_frame(frame[frame["run_id"].isin(family_ids)], split=split)
        seed_runs = runs_from_frame(frame[frame["run_id"].isin(seed_ids)], split=split)
        if len(fam_runs) >= 2 and len(seed_runs) >= 2:
            rep = collapse_report(fam_runs, seed_groups=[seed_runs])
            result[f"collapse_{split}"] = {
                "spread": rep["spread"], "seed_spread": rep["seed_spread"],
                "ratio": rep["ratio"], "widths": [w for w in widths
                                                  if Run(w, lr, tau, 0).name in have],
                "final_losses": {r.run_id: float(r.losses[-1]) for r in fam_runs}}
    n_proxy_max = max(_plan(fam, w)[0] for w in fam.proxy_widths)
    group_sizes = frame.groupby("group")["run_id"].nunique()
    result["groups"] = {str(k): int(v) for k, v in group_sizes.items()}
    bench, text = _hpo_json(
        ["bench", str(curves), "--proxy-max-params", str(n_proxy_max),
         "--split", "val", "--no-ray", "--no-knobs", "--quiet"],
        work / "bench.json", timeout=args.analysis_timeout)
    (work / "bench.txt").write_text(text)
    result["bench_text"] = text
    if bench is not None:
        result["bench"] = {
            mode: {name: {k: m[k] for k in ("mean_regret", "max_regret", "mean_compute",
                                            "best_stopped", "groups")}
                   for name, m in got["methods"].items()}
            for mode, got in bench["modes"].items()}
    evald, text = _hpo_json(
        ["eval-predictor", str(curves), "--proxy-max-params", str(n_proxy_max),
         "--split", "val"], work / "eval.json", timeout=args.analysis_timeout)
    result["eval_text"] = text
    if evald is not None:
        source = next(iter(evald["sources"].values()))
        result["prediction"] = {
            method: {at: {k: v[k] for k in ("median_abs_rel_err", "max_abs_rel_err",
                                             "coverage", "n")} for at, v in by_at.items()}
            for method, by_at in source["methods"].items()}
    result["proxy_max_params"] = n_proxy_max
    return result


# ---- the report ---------------------------------------------------------------------------------
def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def render(results: dict, command: str) -> str:
    """``gpu.md``: the tables of whatever stages have run."""
    lines = ["# The GPU check", "", f"    {command}", ""]
    env = results.get("env")
    if env:
        lines += [f"Device: {env.get('device_name', env['device'])} ({env.get('nvidia_smi', '')})"
                  f", torch {env['torch']}, Python {env['python']}. MFU is against "
                  f"{env['peak_tflops']:g} TFLOP/s, the datasheet's dense bf16 peak"
                  + (f"; an 8192^3 bf16 matmul reaches {env['matmul_bf16_tflops']:.0f} TFLOP/s "
                     f"here" if "matmul_bf16_tflops" in env else "") + ".", ""]
    tp = results.get("throughput")
    if tp:
        lines += ["## Throughput (" + ("bf16" if tp["bf16"] else "fp32")
                  + (", compiled" if tp["compile"] else "") + ")", "",
                  "| shape | N | tokens/step | ours tok/s | plain tok/s | ours / plain "
                  "| ours MFU | plain MFU |", "|---|---|---|---|---|---|---|---|"]
        for row in tp["rows"]:
            ours, plain = row.get("ours") or {}, row.get("plain") or {}
            ratio = f"{row['ratio']:.3f}" if "ratio" in row else "-"
            n = f"{row['n_params'] / 1e6:.0f}M" if "n_params" in row else "-"
            lines.append(
                f"| {row['shape']} (d {row['width']}, L {row['depth']}, ctx {row['context']}) "
                f"| {n} | {row['batch_tokens']:,} | {ours.get('tokens_per_s', 0):,.0f} "
                f"| {plain.get('tokens_per_s', 0):,.0f} | {ratio} | {_pct(ours.get('mfu'))} "
                f"| {_pct(plain.get('mfu'))} |")
        lines += ["", f"Seconds: {results['seconds'].get('throughput', 0):.0f}.", ""]
    fam = results.get("family")
    if fam:
        lines += ["## The family", "",
                  f"{fam['finished']} of {fam['runs']} runs finished"
                  + (f"; missing: {', '.join(fam['missing'])}" if fam["missing"] else "")
                  + f" ({results['seconds'].get('family', 0):.0f} s). Sizes: "
                  + ", ".join(f"width {w}: N {p['n_params']:,}, T {p['total_steps']:,}"
                              for w, p in sorted(fam["plans"].items(), key=lambda x: int(x[0])))
                  + ".", ""]
    an = results.get("analysis")
    if an and "error" not in an:
        lines += ["## Collapse", "", "| split | widths | max spread, t^ in [0.2, 1] "
                  "| seed spread | ratio |", "|---|---|---|---|---|"]
        for split in ("train", "val"):
            c = an.get(f"collapse_{split}")
            if c:
                lines.append(f"| {split} | {', '.join(map(str, c['widths']))} "
                             f"| {_pct(c['spread'], 2)} | {_pct(c['seed_spread'], 2)} "
                             f"| {c['ratio']:.2f} |")
        lines += ["", "## The pruned sweep (val loss; proxies: n_params <= "
                  f"{an['proxy_max_params']:,})", "",
                  "| mode | method | compute | saved | max regret | best stopped |",
                  "|---|---|---|---|---|---|"]
        for mode, methods in an.get("bench", {}).items():
            for name, m in methods.items():
                lines.append(f"| {mode} | {name} | {m['mean_compute']:.3f} "
                             f"| {_pct(1 - m['mean_compute'])} | {_pct(m['max_regret'], 3)} "
                             f"| {m['best_stopped']}/{m['groups']} |")
        pred = an.get("prediction", {})
        if pred:
            lines += ["", "## Final-loss prediction errors (val)", "",
                      "| method | at | targets | median abs error | max abs error | coverage |",
                      "|---|---|---|---|---|---|"]
            for method, by_at in pred.items():
                for at, v in by_at.items():
                    lines.append(f"| {method} | {at} | {v['n']} | "
                                 f"{_pct(v['median_abs_rel_err'], 2)} | "
                                 f"{_pct(v['max_abs_rel_err'], 2)} | {_pct(v['coverage'], 0)} |")
        lines.append("")
    elif an:
        lines += ["## Analysis", "", an["error"], ""]
    secs = results.get("seconds", {})
    lines += ["Seconds per stage: " + ", ".join(f"{k} {v:.0f}" for k, v in secs.items())
              + f"; total {sum(secs.values()):.0f}.", ""]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder for gpu.md, gpu.json, gpu_sweep.csv.gz")
    p.add_argument("--stages", default=",".join(STAGES),
                   help=f"comma-separated, of {', '.join(STAGES)} (default: all)")
    p.add_argument("--device", default="cuda", help="torch device (default: cuda)")
    p.add_argument("--smoke", action="store_true", help="toy sizes, to check every stage")
    p.add_argument("--no-compile", action="store_true", help="throughput without torch.compile")
    p.add_argument("--jobs", type=int, default=12, help="family runs at once (default: 12)")
    p.add_argument("--throughput-warmup", type=int, default=10,
                   help="untimed steps per throughput run (default: 10)")
    p.add_argument("--throughput-steps", type=int, default=40,
                   help="timed steps per throughput run (default: 40)")
    p.add_argument("--throughput-deadline", type=float, default=200.0,
                   help="seconds for the throughput stage (default: 200)")
    p.add_argument("--family-deadline", type=float, default=230.0,
                   help="seconds for the family stage (default: 230)")
    p.add_argument("--analysis-timeout", type=float, default=300.0,
                   help="seconds for each analysis command (default: 300)")
    p.add_argument("--work", type=Path, default=None,
                   help="folder for per-run files (default: a temporary folder)")
    args = p.parse_args()
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        p.error(f"--stages must name stages of {', '.join(STAGES)}, but got {', '.join(bad)}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)
    json_path = args.out / "gpu.json"
    results = json.loads(json_path.read_text()) if json_path.exists() else {}
    results.setdefault("seconds", {})
    command = "python benchmarks/gpu.py " + " ".join(sys.argv[1:])
    for stage in stages:
        _log(f"stage {stage}")
        t0 = time.time()
        try:
            if stage == "env":
                results["env"] = stage_env(args)
            elif stage == "throughput":
                results["throughput"] = stage_throughput(args, work)
            elif stage == "family":
                results["family"] = stage_family(args, work, args.out)
            else:
                results["analysis"] = stage_analysis(args, work, args.out)
        except Exception as exc:  # noqa: BLE001 (a failed stage must not lose the others)
            results[stage] = {"error": f"{type(exc).__name__}: {exc}"}
            _log(f"stage {stage} failed: {type(exc).__name__}: {exc}")
        results["seconds"][stage] = time.time() - t0
        json_path.write_text(json.dumps(results, indent=1) + "\n")
        (args.out / "gpu.md").write_text(render(results, command))
        _log(f"stage {stage}: {results['seconds'][stage]:.0f}s")
    print(render(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
