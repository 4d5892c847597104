"""Training data: token streams and a seeded batch sampler.

Sources (:func:`load_tokens`):

- ``None`` or ``"stdlib"`` (default): byte-level tokens (vocab 256) of the ``.py`` files of the
  running interpreter's standard library (``sysconfig`` ``stdlib`` path, else the folder of
  ``os.__file__``), ``site-packages`` excluded, walked in sorted order, read up to ``max_bytes``.
- a text file or a folder of text files (recursively, sorted; hidden files and ``.bin`` files
  skipped): byte-level tokens, vocab 256.
- a nanoGPT-style ``.bin`` file of ``uint16`` tokens (read with ``numpy.memmap``; vocab = max token
  + 1), or a folder holding ``train.bin`` (and optionally ``val.bin``) as nanoGPT's ``prepare.py``
  writes them.

The train/val split is deterministic: by file for multi-file sources (files taken in the order of
the CRC32 of their relative paths, a fixed shuffle, go to val until they hold ``val_fraction`` of
the bytes), else by position (the last ``val_fraction`` of the stream), and by position too where
splitting by file would leave a side with fewer than ``min_tokens`` tokens.
"""

from __future__ import annotations

import os
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

from hpo._extras import require
from hpo.models.settings import DEFAULT_MAX_BYTES

require("torch", "train")
import torch

__all__ = ["TokenData", "load_tokens", "BatchSampler", "stdlib_dir"]

_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


@dataclass(frozen=True)
class TokenData:
    """A train and a val token stream (1-D tensors: ``uint8`` for bytes, ``uint16`` for .bin)."""

    train: torch.Tensor
    val: torch.Tensor
    vocab_size: int
    source: str  # what was read, for logs

    def __repr__(self) -> str:
        return (f"TokenData(source={self.source!r}, train={self.train.numel():,}, "
                f"val={self.val.numel():,}, vocab_size={self.vocab_size})")


def stdlib_dir() -> Path:
    """The running interpreter's standard-library folder."""
    path = sysconfig.get_paths().get("stdlib")
    if path and Path(path, "os.py").is_file():
        return Path(path)
    return Path(os.__file__).resolve().parent


def _walk(root: Path, suffixes: tuple[str, ...] | None) -> list[Path]:
    """Files under ``root`` in sorted (deterministic) order, skipping hidden and cache folders."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith(".") or name.endswith((".bin", ".pyc")):
                continue
            if suffixes is None or name.endswith(suffixes):
                out.append(Path(dirpath, name))
    return out


def _val_files(blobs: list[tuple[str, bytes]], val_fraction: float) -> set[str]:
    """Held-out files: taken in the order of the CRC32 of their relative paths (a fixed shuffle)
    until they hold ``val_fraction`` of the bytes."""
    target = val_fraction * sum(len(b) for _, b in blobs)
    chosen: set[str] = set()
    size = 0
    for rel, blob in sorted(blobs, key=lambda rb: (zlib.crc32(rb[0].encode("utf-8",
                                                                          "surrogateescape")),
                                                   rb[0])):
        if size >= target:
            break
        chosen.add(rel)
        size += len(blob)
    return chosen


def _position_split(tokens: torch.Tensor, val_fraction: float) -> tuple[torch.Tensor, ...]:
    n_val = int(round(tokens.numel() * val_fraction))
    cut = tokens.numel() - n_val
    return tokens[:cut], tokens[cut:]


def _read_bin(path: Path) -> torch.Tensor:
    """A ``uint16`` token file as a tensor backed by a copy-on-write memmap (nothing is copied)."""
    import numpy as np  # only for .bin files

    return torch.from_numpy(np.memmap(path, dtype=np.uint16, mode="c"))


def load_tokens(
    data: str | os.PathLike | None = None,
    *,
    val_fraction: float = 0.1,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    min_tokens: int = 1024,
) -> TokenData:
    """Load a token source (see the module docstring) and split it into train and val.

    ``max_bytes`` caps how much text is read (files in sorted order; the file that crosses the cap
    is cut); ``None`` reads everything. It does not apply to ``.bin`` files. Raises ``ValueError``
    naming the path when it does not exist or holds no usable text, and naming ``val_fraction``
    when it is outside (0, 1).
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), but got val_fraction={val_fraction!r}.")
    if data is None or str(data) == "stdlib":
        root, suffixes, source = stdlib_dir(), (".py",), "stdlib"
    else:
        root, suffixes, source = Path(data).expanduser(), None, str(data)
        if not root.exists():
            raise ValueError(f"data path does not exist: data={str(data)!r}.")
    # nanoGPT token files
    if root.is_file() and root.suffix == ".bin":
        train, val = _position_split(_read_bin(root), val_fraction)
        return _finish(train, val, source)
    if root.is_dir() and (root / "train.bin").is_file():
        train = _read_bin(root / "train.bin")
        if (root / "val.bin").is_file():
            return _finish(train, _read_bin(root / "val.bin"), source)
        train, val = _position_split(train, val_fraction)
        return _finish(train, val, source)
    # text: bytes
    files = [root] if root.is_file() else _walk(root, suffixes)
    budget = max_bytes if max_bytes is not None else float("inf")
    blobs: list[tuple[str, bytes]] = []
    for path in files:
        if budget <= 0:
            break
        try:
            blob = path.read_bytes()
        except OSError:
            continue
        blob = blob[: int(min(len(blob), budget))]
        budget -= len(blob)
        blobs.append((path.relative_to(root).as_posix() if path != root else path.name, blob))
    val_names = _val_files(blobs, val_fraction) if len(blobs) > 1 else set()
    train_bytes = b"".join(b for rel, b in blobs if rel not in val_names)
    val_bytes = b"".join(b for rel, b in blobs if rel in val_names)
    if not train_bytes and not val_bytes:
        raise ValueError(f"data path holds no readable text: data={source!r}.")
    if len(train_bytes) < min_tokens or len(val_bytes) < min_tokens:
        everything = torch.frombuffer(bytearray(train_bytes + val_bytes), dtype=torch.uint8)
        train, val = _position_split(everything, val_fraction)
    else:
        train = torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8)
        val = torch.frombuffer(bytearray(val_bytes), dtype=torch.uint8)
    return TokenData(train=train, val=val, vocab_size=256, source=source)


def _finish(train: torch.Tensor, val: torch.Tensor, source: str) -> TokenData:
    if train.numel() == 0:
        raise ValueError(f"data path holds no tokens: data={source!r}.")
    top = int(train.numpy().max())  # torch has no max for uint16
    if val.numel():
        top = max(top, int(val.numpy().max()))
    return TokenData(train=train, val=val, vocab_size=top + 1, source=source)


class BatchSampler:
    """Random contiguous windows of a token stream: ``(x, y)``, each ``(batch_size, context)``
    int64, ``y`` shifted by one. Sampling uses its own seeded ``torch.Generator`` (CPU), so two
    samplers with the same seed give the same batches, and :meth:`state_dict` /
    :meth:`load_state_dict` resume the sequence exactly.
    """

    def __init__(self, tokens: torch.Tensor, batch_size: int, context: int, seed: int = 0,
                 device: str | torch.device = "cpu") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, but got batch_size={batch_size!r}.")
        if tokens.numel() < context + 2:
            raise ValueError(
                f"the token stream is too short for context={context}: it has "
                f"{tokens.numel()} tokens, needs at least {context + 2}."
            )
        self.tokens, self.batch_size, self.context = tokens, batch_size, context
        self.device = torch.device(device)
        self.generator = torch.Generator().manual_seed(seed)
        self._offsets = torch.arange(context + 1)

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch ``(x, y)`` on the sampler's device."""
        high = self.tokens.numel() - self.context - 1
        ix = torch.randint(high + 1, (self.batch_size,), generator=self.generator)
        buf = self.tokens[ix[:, None] + self._offsets].long()  # (B, context + 1)
        x, y = buf[:, :-1], buf[:, 1:]
        if self.device.type == "cuda":
            return (x.pin_memory().to(self.device, non_blocking=True),
                    y.pin_memory().to(self.device, non_blocking=True))
        return x.contiguous(), y.contiguous()

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
