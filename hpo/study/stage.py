"""What every stage of a study run reads, declared once: :class:`RunContext`, and the base of
the stages, :class:`Stage` (:mod:`hpo.study.proxies`, :mod:`hpo.study.sweep`,
:mod:`hpo.study.summary`; :class:`hpo.study.runner.StudyRunner` runs them in order)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hpo.study.schema import Study

__all__ = ["RunContext", "Stage", "set_threads"]


@dataclass
class RunContext:
    """The inputs of a study run that its stages share.

    Attributes:
        study: the validated study.
        progress: called with one line of text per event (the CLI prints it).
        prune: whether the run trains proxies and stops trials (``False``: the full sweep).
        workers: processes that train side by side (proxies; the sweep's extra workers).
        t0: when the run started (``time.monotonic``), for the wall-time budget and summary.
    """

    study: Study
    progress: Callable[[str], None]
    prune: bool = True
    workers: int = 1
    t0: float = field(default_factory=time.monotonic)
    _vocab: int | None = field(default=None, init=False, repr=False)

    @property
    def out(self) -> Path:
        """The study's output folder."""
        return self.study.output

    def vocab_size(self) -> int:
        """The vocabulary of the study's data: 256 for bytes, else the token file's (read
        once)."""
        if self._vocab is None:
            source = self.study.data["source"]
            if source == "stdlib" or not str(source).endswith(".bin") and not (
                    Path(source).is_dir() and (Path(source) / "train.bin").exists()):
                self._vocab = 256
            else:
                from hpo.models.data import load_tokens

                self._vocab = load_tokens(source, val_fraction=self.study.data["val_fraction"],
                                          max_bytes=self.study.data["max_bytes"]).vocab_size
        return self._vocab


def set_threads(study: Study) -> None:
    """torch's CPU threads in this process, where the study sets them (``threads``)."""
    if study.threads:
        import torch  # the train extra

        torch.set_num_threads(study.threads)


class Stage:
    """A stage of a study run: it reads the study, the output folder, the progress callable,
    whether the run prunes and how many workers it has from its :class:`RunContext`, and
    nothing else it does not declare."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    @property
    def study(self) -> Study:
        return self.ctx.study

    @property
    def out(self) -> Path:
        return self.ctx.out

    @property
    def progress(self) -> Callable[[str], None]:
        return self.ctx.progress

    @property
    def prune(self) -> bool:
        return self.ctx.prune

    @property
    def workers(self) -> int:
        return self.ctx.workers

    def vocab_size(self) -> int:
        return self.ctx.vocab_size()
