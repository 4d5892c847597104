"""The checks ``hpo run`` and ``hpo validate`` make before a study starts: its input files, its
storage, an output folder that holds this study or none, and the Ray cluster."""

from __future__ import annotations

import json

from hpo.study.folder import IDENTITY_FILE
from hpo.study.schema import Study, StudyError, check_files, check_storage


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
                     where: str = "--address") -> None:
    """What ``hpo run`` needs that is cheap to check, before anything is trained or written
    (``hpo validate`` runs the same): the input files and the storage (every problem in one
    :class:`StudyError`), an output folder that holds this study or none, and with
    ``backend: ray`` the cluster at ``address`` (one TCP connection; a
    :class:`~hpo._errors.UsageError` naming ``where``, the flag or field that gave it)."""
    errors: list[tuple[str, str]] = []
    for check in (check_files, check_storage):
        try:
            check(study)
        except StudyError as exc:
            errors += exc.errors
    if errors:
        raise StudyError(study.source, errors)
    check_resumable(study)
    if study.backend == "ray":
        from hpo._net import check_address

        check_address(address, where)
