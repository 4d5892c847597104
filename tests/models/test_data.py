"""Token sources, the deterministic train/val split and the seeded batch sampler."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hpo.models.data import BatchSampler, load_tokens, stdlib_dir


def test_stdlib_default_is_deterministic_bytes() -> None:
    a = load_tokens(max_bytes=1_000_000)
    b = load_tokens("stdlib", max_bytes=1_000_000)
    # byte-level, capped, and the same every time
    assert a.vocab_size == 256 and a.train.dtype == torch.uint8
    assert a.train.numel() + a.val.numel() == 1_000_000
    assert torch.equal(a.train, b.train) and torch.equal(a.val, b.val)
    # a real held-out share, about val_fraction of the bytes
    assert 0.02 < a.val.numel() / 1_000_000 < 0.3
    assert (stdlib_dir() / "os.py").is_file()


def _write_files(root: Path, n: int) -> dict[str, bytes]:
    contents = {}
    for i in range(n):
        text = (f"# file {i}\n" + f"value_{i} = {i * 7}\n" * 40).encode()
        (root / f"f{i:03d}.txt").write_bytes(text)
        contents[f"f{i:03d}.txt"] = text
    return contents


def test_folder_split_is_by_file(tmp_path: Path) -> None:
    contents = _write_files(tmp_path, 60)
    data = load_tokens(tmp_path, val_fraction=0.2, min_tokens=100)
    train, val = bytes(data.train.tolist()), bytes(data.val.tolist())
    # every file lands whole on one side, and both sides get some
    assert all((c in train) != (c in val) for c in contents.values())
    assert train and val
    assert len(train) + len(val) == sum(map(len, contents.values()))
    again = load_tokens(tmp_path, val_fraction=0.2, min_tokens=100)
    assert torch.equal(again.val, data.val)


def test_single_text_file_split_by_position(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(bytes(range(256)) * 40)
    data = load_tokens(path, val_fraction=0.25)
    # the last quarter is val, the rest train, nothing lost
    assert data.val.numel() == 2560
    assert torch.equal(torch.cat([data.train, data.val]),
                       torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8))


def test_bin_file_and_folder(tmp_path: Path) -> None:
    tokens = (np.arange(5000) * 37 % 1000).astype(np.uint16)
    tokens.tofile(tmp_path / "x.bin")
    data = load_tokens(tmp_path / "x.bin", val_fraction=0.1)
    # vocab from the largest token; split by position
    assert data.vocab_size == 1000
    assert data.train.numel() == 4500 and data.val.numel() == 500
    x, y = BatchSampler(data.train, 3, 16, seed=0).sample()
    assert x.dtype == torch.int64 and int(x.max()) < 1000
    # nanoGPT layout: train.bin and val.bin
    folder = tmp_path / "ds"
    folder.mkdir()
    tokens[:4000].tofile(folder / "train.bin")
    tokens[4000:].tofile(folder / "val.bin")
    data = load_tokens(folder)
    assert data.train.numel() == 4000 and data.val.numel() == 1000


def test_missing_path_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match="nope"):
        load_tokens(missing)


def test_sampler_seeded_shifted_and_resumable() -> None:
    tokens = torch.arange(10_000) % 256
    a = BatchSampler(tokens.to(torch.uint8), 4, 32, seed=3)
    b = BatchSampler(tokens.to(torch.uint8), 4, 32, seed=3)
    x, y = a.sample()
    # shape, dtype, next-token targets
    assert x.shape == y.shape == (4, 32) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    # same seed, same batches; another seed, other batches
    assert torch.equal(b.sample()[0], x)
    assert not torch.equal(BatchSampler(tokens, 4, 32, seed=4).sample()[0], x)
    # the state resumes the sequence exactly
    state = a.state_dict()
    nxt = a.sample()[0]
    c = BatchSampler(tokens.to(torch.uint8), 4, 32, seed=0)
    c.load_state_dict(state)
    assert torch.equal(c.sample()[0], nxt)


def test_sampler_rejects_too_short_stream() -> None:
    with pytest.raises(ValueError, match="context=64"):
        BatchSampler(torch.zeros(50, dtype=torch.uint8), 2, 64)
