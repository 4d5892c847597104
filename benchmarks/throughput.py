"""Throughput of our training loop (``hpo.models.train.train``, what ``hpo train`` runs) against a
minimal plain-PyTorch nanoGPT-style loop of the same shape, measured in the same process.

Both train the same shape (width, depth, heads, context, FFN 4x GELU, learned positions, untied
head) on the same byte-level data with AdamW (0.9, 0.95), a per-step LR and ``loss.item()`` every
step. Runs are interleaved (ours, reference, ours, ...) so drifts in machine load hit both; each
run's throughput counts the steps after its first (warm-up) step. Ours is timed from outside,
between the callback calls of its first and last step, so every per-step cost of the loop
(schedule, sampler, logging, callback) is included.

    nice -n 10 .venv/bin/python -m benchmarks.throughput --width 128 --depth 4 --context 128

Prints a table, the ratio of the medians of wall-clock tokens/s (goal: >= 0.9 on CPU), the median
of the per-repeat ratios (each pair ran back to back, so less sensitive to load drifting on a
shared machine) and the ratio of tokens per CPU second of this process (insensitive to other
processes; meaningful with one thread).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from hpo.models.data import BatchSampler, load_tokens
from hpo.models.train import TrainConfig, train


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
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.reshape(-1))


def run_reference(args: argparse.Namespace, data, seed: int) -> tuple[float, float]:
    """(tokens per wall second, tokens per CPU second) of the plain loop over ``args.steps``
    steps (first step excluded)."""
    torch.manual_seed(seed)
    model = RefGPT(data.vocab_size, args.context, args.width, args.depth, args.heads)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sampler = BatchSampler(data.train, args.batch_tokens // args.context, args.context, seed)
    t0 = c0 = 0.0
    for step in range(1, args.steps + 1):
        for g in opt.param_groups:
            g["lr"] = args.lr * (1 - step / (2 * args.steps))
        x, y = sampler.sample()
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        if step == 1:
            t0, c0 = time.perf_counter(), time.process_time()
    tokens = (args.steps - 1) * args.batch_tokens
    return tokens / (time.perf_counter() - t0), tokens / (time.process_time() - c0)


def run_ours(args: argparse.Namespace, seed: int) -> tuple[float, float, float, int]:
    """(tokens per wall second timed from outside, per CPU second, tokens/s the loop reports, N)
    over ``args.steps`` steps."""
    stamps: list[tuple[float, float]] = []

    def stop(point) -> bool:
        stamps.append((time.perf_counter(), time.process_time()))
        return point.step >= args.steps

    cfg = TrainConfig(width=args.width, depth=args.depth, heads=args.heads, context=args.context,
                      batch_tokens=args.batch_tokens, lr=args.lr, tpp=1000.0, seed=seed,
                      device="cpu", log_every=1, eval_every=10**9, eval_batches=1,
                      max_data_bytes=args.data_bytes)
    result = train(cfg, callback=stop)
    tokens = (args.steps - 1) * args.batch_tokens
    wall = tokens / (stamps[-1][0] - stamps[0][0])
    cpu = tokens / (stamps[-1][1] - stamps[0][1])
    return wall, cpu, result.tokens_per_s, result.n_params


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--steps", type=int, default=20, help="steps per timed run")
    p.add_argument("--repeats", type=int, default=5, help="interleaved runs of each loop")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--data-bytes", type=int, default=2_000_000)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    data = load_tokens(max_bytes=args.data_bytes)
    ours, ours_cpu, ours_inner, ref, ref_cpu = [], [], [], [], []
    n_params = 0
    for r in range(args.repeats):
        wall, cpu, inner, n_params = run_ours(args, seed=r)
        ours.append(wall)
        ours_cpu.append(cpu)
        ours_inner.append(inner)
        rwall, rcpu = run_reference(args, data, seed=r)
        ref.append(rwall)
        ref_cpu.append(rcpu)
        print(f"repeat {r + 1}/{args.repeats}: ours {wall:,.0f} tok/s (loop reports "
              f"{inner:,.0f}; {cpu:,.0f} per CPU s), reference {rwall:,.0f} tok/s "
              f"({rcpu:,.0f} per CPU s)", flush=True)
    print()
    print(f"shape: width {args.width}, depth {args.depth}, heads {args.heads}, context "
          f"{args.context}, batch {args.batch_tokens} tokens, N = {n_params:,}, "
          f"{args.threads} thread(s), {args.steps} steps x {args.repeats} repeats")
    print(f"{'loop':<36}{'median':>10}{'min':>10}{'max':>10}")
    for name, vals in (("hpo.models.train.train (hpo train)", ours),
                       ("  as the loop itself reports", ours_inner),
                       ("plain PyTorch nanoGPT reference", ref),
                       ("ours, tokens per CPU second", ours_cpu),
                       ("reference, tokens per CPU second", ref_cpu)):
        print(f"{name:<36}{statistics.median(vals):>10,.0f}{min(vals):>10,.0f}"
              f"{max(vals):>10,.0f}")
    ratio = statistics.median(ours) / statistics.median(ref)
    paired = statistics.median(o / r for o, r in zip(ours, ref, strict=True))
    cpu_ratio = statistics.median(ours_cpu) / statistics.median(ref_cpu)
    print(f"ratio ours / reference, wall-clock tokens/s (medians): {ratio:.3f}  "
          f"[goal >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'}]")
    print(f"  median of the per-repeat ratios (robust to load drifts): {paired:.3f}")
    print(f"  ratio of tokens per CPU second (robust to other processes): {cpu_ratio:.3f}")
    if not math.isfinite(ratio):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
