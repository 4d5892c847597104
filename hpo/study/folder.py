"""A study's output folder: the names of its coordination files and the lock that admits one
coordinating ``hpo run`` at a time."""

from __future__ import annotations

import os
from pathlib import Path

from hpo._errors import UsageError

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
        import fcntl

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
