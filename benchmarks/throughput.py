"""Throughput of our training loop (``hpo.models.train``, what ``hpo train`` runs) against a
minimal plain-PyTorch nanoGPT-style loop of the same shape.

Both train the same shape (width, depth, heads, context, FFN 4x GELU, learned positions, untied
head, LayerNorm with bias) on the same data with AdamW (0.9, 0.95; fused on CUDA), a per-step LR
and ``loss.item()`` every step (as nanoGPT logs by default), under the same dtype (bf16 autocast on
CUDA) and, with ``--compile``, both ``torch.compile``d. Ours is timed from outside, between the
callback calls of its steps, so every per-step cost of the loop (schedule, sampler, logging,
callback) is included. A run's throughput is tokens per step over the median step time of the
steps after ``--warmup-steps`` (compilation and allocator warm-up excluded; the median keeps a
stray slow step from moving it); MFU is that throughput times the training FLOPs per token of the
shape (``GPT.flops_per_token``: 6 x matmul parameters + attention) over ``--peak-tflops``.

On the CPU (the default) the loops are interleaved, ours then plain, ``--repeats`` times, so
drifts in machine load hit both:

    nice -n 10 .venv/bin/python -m benchmarks.throughput --width 128 --depth 4 --context 128

On a GPU, ``--loop ours`` or ``--loop plain`` runs one loop per process (``benchmarks/gpu.py``
starts them side by side so they compile at once) and ``--lock FILE`` makes each hold an exclusive
lock on FILE from the end of its first step (compilation) on, so warm-up and timed steps never
overlap another process's; ``--barrier N`` has each wait first until all N have compiled:

    python -m benchmarks.throughput --device cuda --compile --width 768 --depth 12 --heads 12 \\
        --context 1024 --batch-tokens 16384 --data TOKENS --loop ours --lock L --barrier 4 \\
        --json ours.json

Prints a table and the ratio ours / plain (goal: >= 0.9 on CPU, >= 0.95 on GPU); ``--json``
writes each loop's measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from hpo.models import GPT, BatchSampler, GPTConfig, TrainConfig, load_tokens, train

H200_BF16_DENSE_TFLOPS = 989.0  # NVIDIA's H100/H200 SXM datasheet: dense bf16 tensor-core peak


# ---- a minimal nanoGPT-style reference --------------------------------------------------------
class RefBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.fc, self.out = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(
            2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class RefGPT(nn.Module):
    def __init__(self, vocab: int, context: int, d: int, depth: int, heads: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(RefBlock(d, heads) for _ in range(depth))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.reshape(-1))


# ---- measurement ------------------------------------------------------------------------------
class _Lock:
    """An exclusive ``flock`` on a file for the timed steps (a no-op without a path).

    With ``barrier`` > 1, :meth:`acquire` first waits until that many processes have reached it
    (each leaves a ``PATH.ready.PID`` file), at most ``barrier_s`` seconds, so that no process
    times its steps while another still compiles."""

    def __init__(self, path: str | None, barrier: int = 1, barrier_s: float = 150.0) -> None:
        self.path, self.fh = path, None
        self.barrier, self.barrier_s = barrier, barrier_s

    def acquire(self) -> None:
        if self.path is None or self.fh is not None:
            return
        if self.barrier > 1:
            Path(f"{self.path}.ready.{os.getpid()}").touch()
            folder, name = Path(self.path).parent, Path(self.path).name
            deadline = time.monotonic() + self.barrier_s
            while (len(list(folder.glob(f"{name}.ready.*"))) < self.barrier
                   and time.monotonic() < deadline):
                time.sleep(0.2)
        self.fh = open(self.path, "a")  # noqa: SIM115 (released by release() or at exit)
        fcntl.flock(self.fh, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.fh is not None:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.fh.close()
            self.fh = None


def _device(args: argparse.Namespace) -> torch.device:
    return torch.device(args.device)


def _bf16(args: argparse.Namespace) -> bool:
    return args.dtype == "bfloat16" or (args.dtype == "auto" and _device(args).type == "cuda")


def _steps_total(args: argparse.Namespace) -> int:
    return args.warmup_steps + args.steps


def _rate(stamps: list[float], args: argparse.Namespace) -> dict:
    """Tokens per second from the stamps taken after each step: the median and the mean over the
    steps after the warm-up."""
    times = [b - a for a, b in zip(stamps[args.warmup_steps - 1:], stamps[args.warmup_steps:],
                                   strict=False)]
    if not times:
        raise SystemExit("--steps must leave at least one timed step")
    return {"tokens_per_s": args.batch_tokens / statistics.median(times),
            "tokens_per_s_mean": args.batch_tokens * len(times) / sum(times),
            "timed_steps": len(times)}


def run_reference(args: argparse.Namespace, data, seed: int, lock: _Lock) -> dict:
    """The plain loop: ``args.warmup_steps`` untimed steps, then ``args.steps`` timed ones; the
    lock is held from the end of the first step (compilation) on."""
    device = _device(args)
    cuda = device.type == "cuda"
    if cuda:
        torch.set_float32_matmul_precision("high")
    torch.manual_seed(seed)
    model = RefGPT(data.vocab_size, args.context, args.width, args.depth, args.heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True if cuda else None)
    forward = torch.compile(model) if args.compile else model
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if _bf16(args)
                else contextlib.nullcontext())
    sampler = BatchSampler(data.train, args.batch_tokens // args.context, args.context, seed,
                           device=device)
    total = _steps_total(args)
    stamps: list[float] = []
    for step in range(1, total + 1):
        for g in opt.param_groups:
            g["lr"] = args.lr * (1 - step / (2 * total))
        x, y = sampler.sample()
        with autocast:
            loss = forward(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        if step == 1:  # compiled and run once: the GPU is this process's from here on
            lock.acquire()
        stamps.append(time.perf_counter())
    lock.release()
    n_params = sum(p.numel() for p in model.parameters())
    return {"loop": "plain", "n_params": n_params, **_rate(stamps, args), **_memory(device)}


def run_ours(args: argparse.Namespace, seed: int, lock: _Lock) -> dict:
    """``hpo.models.train`` with ``loss.item()`` on every step, stopped by its callback after
    ``args.warmup_steps + args.steps`` steps; the lock is held from the callback of the first step
    (compilation) on."""
    stamps: list[float] = []
    total = _steps_total(args)

    def stop(point) -> bool:
        if point.step == 1:  # compiled and run once: the GPU is this process's from here on
            lock.acquire()
        stamps.append(time.perf_counter())
        return point.step >= total

    cfg = TrainConfig(width=args.width, depth=args.depth, heads=args.heads, context=args.context,
                      batch_tokens=args.batch_tokens, lr=args.lr, tpp=1000.0, seed=seed,
                      device=args.device, dtype=args.dtype, compile=args.compile,
                      threads=args.threads, log_every=1, eval_every=10**9, eval_batches=1,
                      data=args.data, max_data_bytes=args.data_bytes,
                      peak_flops=args.peak_tflops * 1e12)
    result = train(cfg, callback=stop)
    lock.release()
    if len(stamps) < total:
        raise SystemExit(f"our loop ran {len(stamps)} of {total} steps ({result.status})")
    return {"loop": "ours", "n_params": result.n_params, **_rate(stamps, args),
            "loop_reports_tokens_per_s": result.tokens_per_s, **_memory(_device(args))}


def _memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {}
    return {"peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30}


def flops_per_token(args: argparse.Namespace, vocab: int) -> float:
    """Training FLOPs per token of the shape, as ``GPT.flops_per_token`` counts them."""
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=vocab, context=args.context, width=args.width,
                              depth=args.depth, heads=args.heads))
    return model.flops_per_token()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--steps", type=int, default=20, help="timed steps per run")
    p.add_argument("--warmup-steps", type=int, default=1,
                   help="untimed steps before them (compilation, warm-up; default: 1)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved runs of each loop")
    p.add_argument("--loop", choices=("both", "ours", "plain"), default="both")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--dtype", default="auto",
                   help="auto (bf16 autocast on CUDA), float32 or bfloat16 (default: auto)")
    p.add_argument("--compile", action="store_true", help="torch.compile both models")
    p.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS,
                   help=f"peak for MFU (default: {H200_BF16_DENSE_TFLOPS:g}, H200 dense bf16)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--data", default=None,
                   help="token source (hpo train --data; default: the stdlib bytes)")
    p.add_argument("--data-bytes", type=int, default=2_000_000)
    p.add_argument("--lock", default=None, help="file to flock for the timed steps")
    p.add_argument("--barrier", type=int, default=1,
                   help="with --lock: wait until this many processes are ready (compiled) before "
                        "timing (default: 1, no wait)")
    p.add_argument("--json", default=None, help="write the measurements here")
    args = p.parse_args()
    if args.warmup_steps < 1 or args.steps < 1:
        p.error("--warmup-steps and --steps must be >= 1")
    torch.set_num_threads(args.threads)
    data = load_tokens(args.data, max_bytes=args.data_bytes)
    lock = _Lock(args.lock, barrier=args.barrier)
    cuda = _device(args).type == "cuda"
    fpt = flops_per_token(args, data.vocab_size)
    runs: list[dict] = []
    for r in range(args.repeats):
        if args.loop in ("both", "ours"):
            runs.append({**run_ours(args, seed=r, lock=lock), "repeat": r})
        if args.loop in ("both", "plain"):
            runs.append({**run_reference(args, data, seed=r, lock=lock), "repeat": r})
        print("repeat", r + 1, ", ".join(f"{x['loop']} {x['tokens_per_s']:,.0f} tok/s"
                                         for x in runs if x["repeat"] == r), flush=True)
    for x in runs:
        x["mfu"] = x["tokens_per_s"] * fpt / (args.peak_tflops * 1e12) if cuda else None
    n_params = {x["loop"]: x["n_params"] for x in runs}
    if len(set(n_params.values())) > 1:
        raise SystemExit(f"the two models differ in size: {n_params}")
    shape = {"width": args.width, "depth": args.depth, "heads": args.heads,
             "context": args.context, "batch_tokens": args.batch_tokens,
             "vocab": data.vocab_size, "n_params": runs[0]["n_params"],
             "flops_per_token": fpt, "device": str(_device(args)), "compile": args.compile,
             "bf16": _bf16(args), "peak_tflops": args.peak_tflops,
             "device_name": torch.cuda.get_device_name() if cuda else "cpu",
             "torch": torch.__version__}
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": shape, "runs": runs}, indent=1) + "\n")
    print(f"\nshape: width {args.width}, depth {args.depth}, heads {args.heads}, context "
          f"{args.context}, batch {args.batch_tokens} tokens, vocab {data.vocab_size}, "
          f"N = {shape['n_params']:,}, {args.steps} timed steps x {args.repeats} repeats")
    medians = {}
    for loop in ("ours", "plain"):
        vals = [x["tokens_per_s"] for x in runs if x["loop"] == loop]
        if vals:
            medians[loop] = statistics.median(vals)
            mfu = (f"  MFU {100 * medians[loop] * fpt / (args.peak_tflops * 1e12):.1f}% of "
                   f"{args.peak_tflops:g} TFLOP/s" if cuda else "")
            print(f"{loop:<6} median {medians[loop]:>12,.0f} tok/s (min {min(vals):,.0f}, max "
                  f"{max(vals):,.0f}){mfu}")
    if len(medians) == 2:
        ratio = medians["ours"] / medians["plain"]
        goal = 0.95 if cuda else 0.9
        print(f"ratio ours / plain: {ratio:.3f}  [goal >= {goal}: "
              f"{'met' if ratio >= goal else 'NOT met'}]")
        if not math.isfinite(ratio):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
