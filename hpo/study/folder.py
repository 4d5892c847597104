"""A study's output folder: the names of its coordination files, the lock that admits one
coordinating ``hpo run`` at a time, the checks ``hpo run`` and ``hpo validate`` make before a study
starts (its input files, its storage, an output folder that holds this study or none, and the Ray
cluster), the folder a run works in (:func:`prepared_folder`) and the curves its runs leave in
it."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpo._errors import UsageError
from hpo._extras import missing
from hpo._net import check_address
from hpo.predictors import read_curves, runs_from_frame
from hpo.study.schema import Study, StudyError, check_files, check_storage

IDENTITY_FILE = "study.json"
LOCK_FILE = ".hpo.lock"
READY_FILE = "sweep.ready"  # written when the proxies and the curve are ready for workers


class FolderLock:
    """One coordinating ``hpo run`` per output folder: an exclusive ``fcntl.flock`` on
    ``.hpo.lock``, which the kernel releases when the process dies (a killed, even unreaped,
    process never blocks a rerun). The file holds the holder's pid, for the message only.
    ``hpo run --worker`` processes do not take it: they join the running study."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> FolderLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(f"output folder {str(self.path.parent)!r} is in use by another "
                             f"hpo run (pid {holder}); wait for it, stop it, or add workers "
                             "to it with hpo run STUDY --worker") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock; the file stays (removing it would race)
            self._fd = None


def check_resumable(study: Study) -> None:
    """``StudyError`` when the output folder holds a different study (nothing is touched)."""
    path = study.output / IDENTITY_FILE
    if not path.exists():
        return
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    mine = json.loads(json.dumps(study.identity()))
    diff = [k for k in mine if stored.get(k) != mine[k]]
    if diff:
        raise StudyError(study.source, [(
            ", ".join(diff),
            f"differs from the study already in {str(study.output)!r}; resuming needs the same "
            "settings (only budget, pruner, backend, device and ray may change): give a new "
            "output folder (--output) or restore the file")])


def check_before_run(study: Study, address: str | None = None,
                     where: str = "--address", data: bool = True) -> None:
    """What ``hpo run`` needs that is cheap to check, before anything is trained or written
    (``hpo validate`` runs the same, but for the data, ``data=False``: a study's data may live
    only on the machine that runs it): the input files and the storage (every problem in one
    :class:`StudyError`), an output folder that holds this study or none, and with
    ``backend: ray`` the cluster at ``address`` (one TCP connection; a
    :class:`~hpo._errors.UsageError` naming ``where``, the flag or field that gave it)."""
    errors: list[tuple[str, str]] = []
    for check in (functools.partial(check_files, data=data), check_storage):
        try:
            check(study)
        except StudyError as exc:
            errors += exc.errors
    if errors:
        raise StudyError(study.source, errors)
    check_resumable(study)
    if study.backend == "ray":
        check_address(address, where)


@contextlib.contextmanager
def prepared_folder(study: Study, address: str | None = None,
                    where: str = "--address") -> Iterator[Path]:
    """The output folder of a coordinating ``hpo run``, checked (:func:`check_before_run`),
    created and locked (:class:`FolderLock`) for the ``with`` block, with the study's identity
    (``study.json``, written once: what a resume must match) and its settings as run
    (``config.json``)."""
    check_before_run(study, address, where)
    out = study.output
    out.mkdir(parents=True, exist_ok=True)
    with FolderLock(out):
        ident = out / IDENTITY_FILE
        if not ident.exists():
            ident.write_text(json.dumps(study.identity(), indent=1))
        (out / "config.json").write_text(json.dumps(study.to_dict(), indent=1))
        yield out


def needed_extras(study: Study, report: bool = True) -> list[tuple[str, str]]:
    """The optional packages ``hpo run`` needs for ``study`` that are not installed, as
    ``(module, extra)``: torch (``[train]``: every study trains), ray (``[ray]``: ``backend:
    ray``), matplotlib (``[plots]``: the report's plots, with ``report``)."""
    needs = [("torch", "train")]
    if study.backend == "ray":
        needs.append(("ray", "ray"))
    if report:
        needs.append(("matplotlib", "plots"))
    return [(module, extra) for module, extra in needs if missing(module)]


def curve_runs(folder: Path, pattern: str = "*.csv.gz") -> list[Any]:
    """The train curves (``hpo.predictors.RunCurve``) of the curve files in ``folder``."""
    paths = sorted(folder.glob(pattern))
    return runs_from_frame(read_curves(paths), split="train") if paths else []
