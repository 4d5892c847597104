"""The study schema: one YAML file describes a model family and a search (``hpo run``).

:func:`load_study` reads a file with ``yaml.safe_load`` and :func:`parse_study` checks a mapping
against the schema below, collecting **every** error (unknown key, wrong type, out-of-range value,
inconsistent settings) with its path (``budget.trials``, ``search.lr.low``) before raising one
:class:`StudyError` that lists them all. Nothing is trained or written before a study validates.

Sections (every key optional unless marked; defaults in :data:`SCHEMA` and ``hpo validate
--show``). A relative path the study reads (``data.source``, ``reference``) is relative to the
study file's folder; the paths it writes (``output``, the file of a ``sqlite:///`` or
``journal:///`` storage) are relative to the working directory, so ``hpo run
studies/quickstart.yaml`` writes to ``runs/quickstart``. Absolute paths stay as they are.

=============  ======================================================================
``name``       study name (Optuna study name; default: the file's stem)
``output``     output folder (default ``runs/<name>``, relative to the working directory)
``storage``    Optuna storage: an SQLAlchemy URL (default ``sqlite:///<output>/study.db``;
               ``postgresql://user:password@host/db`` for workers on several machines) or
               ``journal:///<path>``, Optuna's JournalStorage on a (shared) file
``heartbeat``  how often a worker marks its running trial alive (default ``10s``); a trial
               silent for three heartbeats belonged to a dead worker and is run again
``backend``    ``local`` (trials one after another in this process) or ``ray``
``device``     ``auto``, ``cpu``, ``cuda`` or ``cuda:N``
``threads``    CPU threads for torch (default: torch's choice)
``workers``    processes that train the proxies and run the sweep's trials side by side
               (default 1; ``hpo run --workers`` overrides it); with ``backend: ray`` the
               proxies train that many at a time here and the cluster runs the trials
``seed``       seed of the sampler and of model init in trials (default 0)
``objective``  ``train`` (the smoothed final train loss, what the predictor predicts; default)
               or ``val`` (the final val loss); the pruner sees the same loss: trials report
               their val loss, evaluated at each of the ``report_points``
``model``      the family: target ``width``, ``depth``, ``heads``, ``context``, ``ffn_ratio``,
               ``activation``, ``position``, ``parametrization``, ``alpha``, ``base_width``,
               ``base_depth`` (CompleteP settings)
``data``       ``source`` (``stdlib``, a text file or folder, a ``.bin``; relative to the
               YAML), ``max_bytes``, ``val_fraction``
``recipe``     ``tpp``, ``tau`` or ``weight_decay``, ``lr`` (base LR at the base shape),
               ``schedule``, ``warmup``, ``batch_tokens``, ``grad_clip``; a searched key
               overrides it per trial
``proxies``    ``widths``, ``depth``, ``seeds``, ``tpp``, ``vary`` (controls to vary so the
               universal curve covers the sweep: a list of searched names, which take the low,
               middle and high of their range, or a mapping name -> values)
``search``     name -> Optuna distribution: ``{type: float|int, low, high, log, step}`` or
               ``{type: categorical, choices: [...]}``; ``values: [...]`` gives the points the
               ``grid`` sampler uses. Names: recipe keys (``lr``, ``tau``, ``weight_decay``,
               ``warmup``, ``batch_tokens``, ``schedule``, ``grad_clip``) and ``seed``
``sampler``    ``type`` (``tpe``, ``random``, ``grid``, ``qmc``), ``seed``, ``n_startup_trials``
``pruner``     ``enabled``, ``report_points`` and one key per setting of
               :class:`hpo.PrunerSettings` (``checkpoints``, ``threshold``, ``tolerance``,
               ``margin``, ``n_startup_trials``, ``n_calibration_trials``, ``prior``,
               ``rejudge_every``, ``stale_after``: :class:`hpo.CollapsePruner`'s arguments;
               :func:`hpo.study.pruner.pruner_kwargs`).
               Its settings are validated by :class:`hpo.pruning.PrunerSettings`, the
               validator of the pruner's constructor: the YAML accepts exactly what it does
``budget``     ``trials`` (finished trials wanted), ``wall_time`` (seconds or ``"10m"``)
``diagnose``   ``stop_on_alert`` (default false): whether a trial whose collapse residual alerts
               (it drifts off the universal curve: a broken run) is stopped; every proxy and
               trial is monitored either way and its alert stored and reported. ``inject``
               (``KIND@T``, as ``hpo train --inject``; default none) breaks trial number
               ``inject_trial`` (default 0) on purpose, to see the monitor catch it
``ray``        ``address``, ``cpus_per_trial``, ``gpus_per_trial``, ``max_concurrent``
``reference``  a file (relative to the YAML) with a full sweep's summary to compare the choice with
=============  ======================================================================
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hpo._errors import UsageError
from hpo._net import mask_password
from hpo.models.settings import DEFAULT_TAU, RunSettings
from hpo.models.settings import SECTIONS as RUN_SECTIONS
from hpo.pruning import PrunerSettings

__all__ = [
    "StudyError",
    "Study",
    "SCHEMA",
    "SEARCHABLE",
    "load_study",
    "parse_study",
    "check_storage",
    "JOURNAL_PREFIX",
    "check_files",
    "parse_duration",
]


class StudyError(UsageError):
    """A study file that does not validate; ``errors`` holds ``(path, message)`` pairs."""

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.source = source
        self.errors = errors
        lines = [f"{path}: {msg}" if path else msg for path, msg in errors]
        n = len(errors)
        head = f"{source}: {n} error{'s' if n != 1 else ''}"
        super().__init__(head + ("" if n == 0 else ": " + "; ".join(lines)))

    def lines(self) -> list[str]:
        return [f"{path}: {msg}" if path else msg for path, msg in self.errors]

    def report_lines(self) -> list[str]:
        """One error: one line ``source: path: message``; several: a head line, then one
        indented line each."""
        if len(self.errors) == 1:
            return [f"{self.source}: {self.lines()[0]}"]
        if not self.errors:
            return [str(self)]
        return [f"{self.source}: {len(self.errors)} errors", *(f"  {x}" for x in self.lines())]


# ---- field checks ---------------------------------------------------------------------------
# a check returns None when the value is fine, else a message ("must be ..., got ...")

Check = Callable[[Any], "str | None"]


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(lo: int | None = None) -> Check:
    def check(x: Any) -> str | None:
        if isinstance(x, bool) or not isinstance(x, int):
            return f"must be an integer, got {x!r}"
        if lo is not None and x < lo:
            return f"must be >= {lo}, got {x!r}"
        return None

    return check


def _float(lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           hi_open: bool = False) -> Check:
    def check(x: Any) -> str | None:
        if not _num(x):
            return f"must be a finite number, got {x!r}"
        if lo is not None and (x <= lo if lo_open else x < lo):
            return f"must be {'>' if lo_open else '>='} {lo:g}, got {x!r}"
        if hi is not None and (x >= hi if hi_open else x > hi):
            return f"must be {'<' if hi_open else '<='} {hi:g}, got {x!r}"
        return None

    return check


def _str(options: tuple[str, ...] | None = None) -> Check:
    def check(x: Any) -> str | None:
        if not isinstance(x, str):
            return f"must be a string, got {x!r}"
        if options is not None and x not in options:
            return f"must be one of {', '.join(options)}, got {x!r}"
        return None

    return check


def _bool(x: Any) -> str | None:
    return None if isinstance(x, bool) else f"must be true or false, got {x!r}"


def _pruner_setting(name: str) -> Check:
    """The check of the pruner setting ``name``: :class:`hpo.pruning.PrunerSettings`'s, the
    one validator ``hpo.CollapsePruner`` and ``hpo.CollapseScheduler`` use too."""

    def check(x: Any) -> str | None:
        return PrunerSettings.check_field(name, x)

    return check


def _fault(x: Any) -> str | None:
    """A fault ``KIND@T`` of ``hpo.models.faults``."""
    from hpo.models.faults import FAULT_FORMAT, parse_fault

    try:
        parse_fault(x)
    except ValueError:
        return f"must be {FAULT_FORMAT}, got {x!r}"
    return None


def _optional(check: Check) -> Check:
    def inner(x: Any) -> str | None:
        return None if x is None else check(x)

    return inner


def _list_of(check: Check, min_len: int = 1) -> Check:
    def inner(x: Any) -> str | None:
        if not isinstance(x, list):
            return f"must be a list, got {x!r}"
        if len(x) < min_len:
            return f"must have at least {min_len} item(s), got {x!r}"
        for i, item in enumerate(x):
            msg = check(item)
            if msg:
                return f"item {i} {msg}"
        return None

    return inner


def _schedule(x: Any) -> str | None:
    from hpo.predictors.schedules import SCHEDULE_RULE, parse_schedule

    try:
        parse_schedule(x)
    except ValueError:
        return f"must be {SCHEDULE_RULE}, got {x!r}"
    return None


def _device(x: Any) -> str | None:
    if isinstance(x, str) and (x in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", x)):
        return None
    return f"must be auto, cpu, cuda or cuda:N, got {x!r}"


def parse_duration(x: Any) -> float | None:
    """Seconds from a number or a string like ``90``, ``90s``, ``10m``, ``1.5h``; None if bad."""
    if _num(x):
        return float(x)
    if isinstance(x, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", x)
        if m:
            return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    return None


def _duration(x: Any) -> str | None:
    seconds = parse_duration(x)
    if seconds is None:
        return f"must be seconds or a duration like '10m' or '2h', got {x!r}"
    if seconds <= 0:
        return f"must be > 0, got {x!r}"
    return None


#: the storage URL prefix of Optuna's JournalStorage on a file (``journal:///runs/s/journal.log``)
JOURNAL_PREFIX = "journal:///"

def _run_setting(name: str) -> Check:
    """The check of the run setting ``name``: :class:`hpo.models.settings.RunSettings`'s, the
    one validator of ``hpo train`` and ``TrainConfig`` too."""

    def check(x: Any) -> str | None:
        return RunSettings.check_field(name, x)

    return check


def _run_settings(section: str) -> dict[str, tuple[Check, Any]]:
    """The schema of a run-settings section: each setting's key, check and default."""
    return {key: (_run_setting(name), RunSettings.declared(name)["default"])
            for key, name in RunSettings.in_section(section).items()}


# section -> key -> (check, default)
SCHEMA: dict[str, dict[str, tuple[Check, Any]]] = {
    # the run settings' sections: one key per hpo.models.settings.RunSettings field
    **{section: _run_settings(section) for section in RUN_SECTIONS},
    "proxies": {
        "widths": (_list_of(_int(1)), None),  # None: [model.base_width]
        "depth": (_optional(_int(1)), None),  # None: model.depth
        "seeds": (_list_of(_int(0)), [0]),
        "tpp": (_optional(_float(0, lo_open=True)), None),  # None: recipe.tpp
        "vary": (lambda x: None if isinstance(x, (list, dict)) or x is None
                 else f"must be a list of searched names or a mapping name -> values, got {x!r}",
                 None),
    },
    "sampler": {
        "type": (_str(("tpe", "random", "grid", "qmc")), "tpe"),
        "seed": (_optional(_int(0)), None),  # None: the study's seed
        "n_startup_trials": (_optional(_int(0)), None),
    },
    "pruner": {
        "enabled": (_bool, True),
        "report_points": (_int(10), 200),  # intermediate values reported per trial
        # and one key per setting of hpo.pruning.PrunerSettings, checked by it
        **{name: (_pruner_setting(name), list(d) if isinstance(d, tuple) else d)
           for name, d in PrunerSettings.defaults().items()},
    },
    "budget": {
        "trials": (_int(1), 10),
        "wall_time": (_optional(_duration), None),
    },
    "diagnose": {
        "stop_on_alert": (_bool, False),
        "inject": (_optional(_fault), None),  # KIND@T: break one trial on purpose (a demo)
        "inject_trial": (_int(0), 0),  # the number of the trial it breaks
    },
    "ray": {
        "address": (_optional(_str()), None),
        "cpus_per_trial": (_float(0, lo_open=True), 1.0),
        "gpus_per_trial": (_float(0), 0.0),
        "max_concurrent": (_optional(_int(1)), None),
        "max_failures": (_int(0), 2),  # retries of a trial whose worker dies (or that raises)
    },
}
TOP: dict[str, tuple[Check, Any]] = {
    "name": (_optional(_str()), None),
    "output": (_optional(_str()), None),
    "storage": (_optional(_str()), None),
    "backend": (_str(("local", "ray")), "local"),
    "device": (_device, "auto"),
    "threads": (_optional(_int(1)), None),
    "workers": (_int(1), 1),
    "seed": (_int(0), 0),
    "objective": (_str(("train", "val")), "train"),
    "reference": (_optional(_str()), None),
    "description": (_optional(_str()), None),
    "heartbeat": (_duration, 10),
}

#: search-space names a trial may set, and the schema section they override
SEARCHABLE: dict[str, str] = {
    "lr": "recipe", "tau": "recipe", "weight_decay": "recipe", "warmup": "recipe",
    "batch_tokens": "recipe", "schedule": "recipe", "grad_clip": "recipe", "seed": "top",
}
_DIST_KEYS = {
    "float": {"type", "low", "high", "log", "step", "values"},
    "int": {"type", "low", "high", "log", "step", "values"},
    "categorical": {"type", "choices"},
}


@dataclass
class Study:
    """A validated study: plain dicts per section with every default filled in."""

    name: str
    output: Path
    storage: str
    backend: str
    device: str
    threads: int | None
    seed: int
    objective: str
    model: dict[str, Any]
    data: dict[str, Any]
    recipe: dict[str, Any]
    proxies: dict[str, Any]
    search: dict[str, dict[str, Any]]
    sampler: dict[str, Any]
    pruner: dict[str, Any]
    budget: dict[str, Any]
    ray: dict[str, Any]
    diagnose: dict[str, Any] = field(default_factory=lambda: {
        "stop_on_alert": False, "inject": None, "inject_trial": 0})
    reference: Path | None = None
    description: str | None = None
    heartbeat: float = 10.0
    workers: int = 1
    source: str = "<study>"
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def wall_time_s(self) -> float | None:
        wt = self.budget.get("wall_time")
        return None if wt is None else parse_duration(wt)

    def identity(self) -> dict[str, Any]:
        """What must not change when a study is resumed (the budget, backend, device may);
        ``data.source`` as the study file gives it, so the same study resumes from any working
        directory."""
        written = self.raw.get("data") or {}
        data = {**self.data, "source": written.get("source", self.data["source"])}
        out = {"name": self.name, "model": self.model, "data": data,
               "recipe": self.recipe, "proxies": self.proxies, "search": self.search,
               "sampler": self.sampler, "objective": self.objective, "seed": self.seed}
        if not self.pruner["enabled"]:
            del out["proxies"]  # a sweep without pruning trains no proxies
        if self.diagnose.get("inject"):  # a trial broken on purpose: not the clean study
            out["inject"] = [self.diagnose["inject"], self.diagnose["inject_trial"]]
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every setting of the study as it runs (``config.json``, ``hpo validate --show``):
        paths as strings, the storage's password masked."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)
               if f.name not in ("source", "raw")}
        out["output"] = str(self.output)
        out["reference"] = None if self.reference is None else str(self.reference)
        out["storage"] = mask_password(self.storage)  # printed and written: never a password
        return out


def _suggest(key: str, known: Mapping[str, Any] | set[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_section(name: str, given: Any, spec: dict[str, tuple[Check, Any]],
                   errors: list[tuple[str, str]]) -> dict[str, Any]:
    out = {k: copy.deepcopy(default) for k, (_, default) in spec.items()}
    if given is None:
        return out
    if not isinstance(given, dict):
        errors.append((name, f"must be a mapping, got {given!r}"))
        return out
    for key, value in given.items():
        path = f"{name}.{key}"
        if key not in spec:
            known = ", ".join(spec)
            errors.append((path, f"unknown key{_suggest(str(key), spec)}; known: {known}"))
            continue
        msg = spec[key][0](value)
        if msg:
            errors.append((path, msg))
        else:
            out[key] = value
    return out


def _check_distribution(name: str, spec: Any, errors: list[tuple[str, str]]) -> dict | None:
    path = f"search.{name}"
    if name not in SEARCHABLE:
        errors.append((path, f"not a searchable setting{_suggest(name, SEARCHABLE)}; "
                             f"searchable: {', '.join(SEARCHABLE)}"))
        return None
    if not isinstance(spec, dict):
        errors.append((path, f"must be a mapping like {{type: float, low: 0.001, high: 0.1, "
                             f"log: true}}, got {spec!r}"))
        return None
    kind = spec.get("type", "categorical" if "choices" in spec else "float")
    if not isinstance(kind, str) or kind not in _DIST_KEYS:
        errors.append((f"{path}.type", f"must be one of float, int, categorical, got {kind!r}"))
        return None
    n_before = len(errors)
    for key in spec:
        if key not in _DIST_KEYS[kind]:
            errors.append((f"{path}.{key}", f"unknown key for a {kind} distribution"
                                            f"{_suggest(str(key), _DIST_KEYS[kind])}; known: "
                                            f"{', '.join(sorted(_DIST_KEYS[kind]))}"))
    out = {"type": kind}
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            errors.append((f"{path}.choices", f"must be a non-empty list, got {choices!r}"))
        elif not all(isinstance(c, (str, int, float, bool)) or c is None for c in choices):
            errors.append((f"{path}.choices", "must hold strings, numbers, booleans or null"))
        else:
            out["choices"] = choices
        return out if len(errors) == n_before else None
    check = _int() if kind == "int" else _float()
    for key in ("low", "high"):
        if key not in spec:
            errors.append((f"{path}.{key}", "is required"))
            continue
        msg = check(spec[key])
        if msg:
            errors.append((f"{path}.{key}", msg))
        else:
            out[key] = spec[key]
    log = spec.get("log", False)
    if not isinstance(log, bool):
        errors.append((f"{path}.log", f"must be true or false, got {log!r}"))
    out["log"] = bool(log)
    step = spec.get("step")
    if step is not None:
        msg = (_int(1) if kind == "int" else _float(0, lo_open=True))(step)
        if msg:
            errors.append((f"{path}.step", msg))
        elif log:
            errors.append((f"{path}.step", "cannot be combined with log: true"))
        out["step"] = step
    if "low" in out and "high" in out:
        if out["low"] > out["high"]:
            errors.append((path, f"low must be <= high, got low={out['low']!r} > "
                                 f"high={out['high']!r}"))
        elif log and out["low"] <= 0:
            errors.append((f"{path}.low", f"must be > 0 with log: true, got {out['low']!r}"))
    values = spec.get("values")
    if values is not None:
        msg = _list_of(check)(values)
        if msg:
            errors.append((f"{path}.values", msg))
        elif "low" in out and "high" in out and any(
                not out["low"] <= v <= out["high"] for v in values):
            errors.append((f"{path}.values", f"must lie in [low, high] = [{out['low']!r}, "
                                             f"{out['high']!r}], got {values!r}"))
        else:
            out["values"] = values
    # searched settings that must stay positive
    if name in ("lr", "tau", "batch_tokens") and "low" in out and out["low"] <= 0:
        errors.append((f"{path}.low", f"must be > 0 for {name}, got {out['low']!r}"))
    return out if len(errors) == n_before else None


def grid_values(dist: dict[str, Any]) -> list[Any] | None:
    """The points a grid sampler uses for one distribution (None if it has none)."""
    if dist["type"] == "categorical":
        return list(dist["choices"])
    return list(dist["values"]) if "values" in dist else None


def range_points(dist: dict[str, Any]) -> list[Any]:
    """Low, middle (geometric with log) and high of a distribution; categorical: its choices."""
    if dist["type"] == "categorical":
        return list(dist["choices"])
    lo, hi = dist["low"], dist["high"]
    mid = math.sqrt(lo * hi) if dist.get("log") else (lo + hi) / 2
    if dist["type"] == "int":
        mid = int(round(mid))
    else:
        mid = float(f"{mid:.4g}")
    return sorted({lo, mid, hi})


def parse_study(data: Any, source: str = "<study>", base_dir: Path | None = None) -> Study:
    """Validate a study mapping; raise :class:`StudyError` listing every problem at once.
    ``base_dir``: the folder the relative paths it reads (``data.source``, ``reference``) are
    relative to (:func:`load_study`: the study file's; ``None``: the working directory)."""
    errors: list[tuple[str, str]] = []
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise StudyError(source, [("", f"the file must hold a mapping, got {kind}")])
    top = _check_top(data, errors)
    parts = {name: _check_section(name, data.get(name), spec, errors)
             for name, spec in SCHEMA.items()}
    search = _check_search(data.get("search"), errors)
    _check_model_and_recipe(parts["model"], parts["recipe"], search, errors)
    _resolve_proxies(parts["proxies"], parts["model"], parts["recipe"], search, errors)
    if parts["sampler"]["type"] == "grid":
        for name, dist in search.items():
            if grid_values(dist) is None:
                errors.append((f"search.{name}.values", "is required with sampler.type: grid "
                                                        "(the grid points)"))
    if parts["diagnose"]["inject"] is not None and top["backend"] == "ray":
        errors.append(("diagnose.inject", "breaks a trial of the local backend only (Ray "
                                          "numbers its trials as they start), got backend: ray"))
    if errors:
        raise StudyError(source, errors)
    return _build_study(top, parts, search, data, source, base_dir)


def _check_top(data: dict[str, Any], errors: list[tuple[str, str]]) -> dict[str, Any]:
    """The top-level keys (not the sections) with their defaults; problems into ``errors``."""
    sections = set(SCHEMA) | {"search"}
    top: dict[str, Any] = {k: default for k, (_, default) in TOP.items()}
    for key, value in data.items():
        if key in sections:
            continue
        if key not in TOP:
            known = sorted(set(TOP) | sections)
            errors.append((str(key), f"unknown key{_suggest(str(key), known)}; "
                                     f"known: {', '.join(known)}"))
            continue
        msg = TOP[key][0](value)
        if msg:
            errors.append((str(key), msg))
        else:
            top[key] = value
    return top


def _check_search(given: Any, errors: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """The ``search`` section: name -> validated distribution (the valid ones)."""
    search: dict[str, dict[str, Any]] = {}
    if given is None:
        errors.append(("search", "is required: name -> distribution, e.g. lr: {type: float, "
                                 "low: 0.003, high: 0.03, log: true}"))
    elif not isinstance(given, dict) or not given:
        errors.append(("search", f"must be a non-empty mapping, got {given!r}"))
    else:
        for name, spec in given.items():
            dist = _check_distribution(str(name), spec, errors)
            if dist is not None:
                search[str(name)] = dist
    return search


def _check_model_and_recipe(model: dict[str, Any], recipe: dict[str, Any],
                            search: dict[str, Any], errors: list[tuple[str, str]]) -> None:
    """Checks across the model, the recipe and the search; fills the recipe's tau or
    weight_decay (the searched one wins; neither given: tau 0.2)."""
    if isinstance(model["width"], int) and isinstance(model["heads"], int) \
            and model["width"] % model["heads"]:
        errors.append(("model.width", f"must be divisible by model.heads={model['heads']}, "
                                      f"got {model['width']}"))
    if recipe["tau"] is not None and recipe["weight_decay"] is not None:
        errors.append(("recipe", "give tau or weight_decay, not both"))
    if "tau" in search and "weight_decay" in search:
        errors.append(("search", "search tau or weight_decay, not both"))
    if recipe["tau"] is None and recipe["weight_decay"] is None and "weight_decay" not in search:
        recipe["tau"] = DEFAULT_TAU
    if "weight_decay" in search:
        recipe["tau"] = None
    if "tau" in search:
        recipe["weight_decay"] = None
    if isinstance(recipe["batch_tokens"], int) and isinstance(model["context"], int) \
            and recipe["batch_tokens"] % model["context"]:
        errors.append(("recipe.batch_tokens", f"must be a multiple of model.context="
                                              f"{model['context']}, got {recipe['batch_tokens']}"))
    if _num(recipe["warmup"]) and 1 <= recipe["warmup"] and recipe["warmup"] != int(
            recipe["warmup"]):
        errors.append(("recipe.warmup", "must be a fraction < 1 or a whole number of steps"))


def _resolve_proxies(proxies: dict[str, Any], model: dict[str, Any], recipe: dict[str, Any],
                     search: dict[str, Any], errors: list[tuple[str, str]]) -> None:
    """Fill the proxies' widths (``model.base_width``) and ``vary`` (name -> values: the
    searched tau or weight_decay's low, middle and high by default), and check the plan."""
    if proxies["widths"] is None:
        proxies["widths"] = [model["base_width"]]
    if isinstance(proxies["widths"], list) and isinstance(model["heads"], int):
        for i, w in enumerate(proxies["widths"]):
            if isinstance(w, int) and w % model["heads"]:
                errors.append((f"proxies.widths[{i}]", f"must be divisible by model.heads="
                                                       f"{model['heads']}, got {w}"))
    resolved = _resolve_vary(proxies["vary"], search, errors)
    proxies["vary"] = resolved
    if "tau" in resolved and recipe["tau"] is None:
        errors.append(("proxies.vary.tau", "needs tau in the recipe or the search "
                                           "(the recipe sets weight_decay)"))
    if isinstance(proxies["widths"], list) and isinstance(proxies["seeds"], list):
        n = len(proxies["widths"]) * len(proxies["seeds"])
        for values in resolved.values():
            n *= len(values)
        if n < 3:
            errors.append(("proxies", f"plan {n} proxy run(s); the universal curve's interval "
                                      "calibration needs at least 3 (add widths, seeds or vary)"))


def _resolve_vary(vary: Any, search: dict[str, Any],
                  errors: list[tuple[str, str]]) -> dict[str, list[Any]]:
    """``proxies.vary`` as name -> the values the proxies train."""
    if vary is None:
        vary = ["tau"] if "tau" in search else (["weight_decay"] if "weight_decay" in search
                                               else [])
    resolved: dict[str, list[Any]] = {}
    if isinstance(vary, list):
        for i, name in enumerate(vary):
            if not isinstance(name, str) or name not in search:
                errors.append((f"proxies.vary[{i}]", f"must name a searched setting (then its "
                                                     f"low, middle and high are trained), got "
                                                     f"{name!r}; searched: {', '.join(search)}"))
            else:
                resolved[name] = range_points(search[name])
    elif isinstance(vary, dict):
        for name, values in vary.items():
            if not isinstance(name, str) or name not in SEARCHABLE:
                errors.append((f"proxies.vary.{name}", f"not a searchable setting"
                                                       f"{_suggest(str(name), SEARCHABLE)}"))
            elif not isinstance(values, list) or not values:
                errors.append((f"proxies.vary.{name}", f"must be a non-empty list, got "
                                                       f"{values!r}"))
            else:
                resolved[name] = values
    return resolved


def _build_study(top: dict[str, Any], parts: dict[str, dict[str, Any]],
                 search: dict[str, Any], data: dict[str, Any], source: str,
                 base_dir: Path | None) -> Study:
    """The :class:`Study` of validated parts: its name, output, storage, data source and
    reference resolved (a bad name is a :class:`StudyError`)."""
    name = top["name"] or (Path(source).stem if source != "<study>" else "study")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise StudyError(source, [("name", f"must use letters, digits, '_', '.', '-' only, "
                                           f"got {name!r}")])
    output = Path(top["output"] or f"runs/{name}")
    storage = top["storage"] or f"sqlite:///{output / 'study.db'}"
    reference = None
    if top["reference"]:
        reference = Path(_in_study_folder(top["reference"], base_dir)).expanduser()
    if parts["data"]["source"] != "stdlib":
        parts["data"]["source"] = _in_study_folder(parts["data"]["source"], base_dir)
    sampler = parts["sampler"]
    if sampler["seed"] is None:
        sampler["seed"] = top["seed"]
    special = {"name": name, "output": output, "storage": storage, "reference": reference,
               "heartbeat": parse_duration(top["heartbeat"])}
    return Study(**{**top, **special}, **parts, search=search, source=source,
                 raw=copy.deepcopy(data))


def _in_study_folder(path: str, base_dir: Path | None) -> str:
    """A path the study file gives, relative to the file's folder ``base_dir``; an absolute one
    (``/...``, ``~/...``) or one without ``base_dir`` as given."""
    if base_dir is None or Path(path).expanduser().is_absolute():
        return path
    return str(base_dir / path)


@functools.cache
def _unique_key_loader() -> type:
    """A ``yaml.SafeLoader`` that refuses a mapping with a key given twice (``safe_load``
    keeps the last silently, so a study would run with a value its author did not mean); built
    on first use (``import hpo`` does not import yaml)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the constructor says so below
                duplicate = False
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice", key_node.start_mark)
        return loader.construct_mapping(node)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Loader


def load_study(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Study:
    """Read and validate a study YAML file (``StudyError`` on any problem, all listed).

    ``overrides`` maps top-level keys (``output``, ``storage``, ``backend``), or
    ``section.key`` (``diagnose.inject``), to values that replace the file's (``None``: keep).
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise StudyError(str(path), [("", "file not found")])
    try:
        loader = _unique_key_loader()(path.read_text())  # a yaml.SafeLoader
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise StudyError(str(path), [("", f"not valid YAML{where}: {problem}")]) from None
    if overrides and isinstance(data, dict):
        data = dict(data)
        for key, value in overrides.items():
            if value is None:
                continue
            section, _, name = key.rpartition(".")
            if section:
                part = data.get(section)
                data[section] = {**(part if isinstance(part, dict) else {}), name: value}
            else:
                data[key] = value
    return parse_study(data, source=str(path), base_dir=path.parent)


def check_storage(study: Study) -> None:
    """Raise :class:`StudyError` (path ``storage``) when the storage cannot be reached.

    SQLite: the file's folder must exist or lie inside the study's output folder (created at
    run time). Other SQLAlchemy URLs: a connection is attempted (5 s timeout). Nothing is
    created or modified.
    """
    url = study.storage
    shown = mask_password(url)  # error messages never hold the password
    if url.startswith(("sqlite:///", JOURNAL_PREFIX)):
        path = Path(url.split(":///", 1)[1])
        folder = path.parent
        out = study.output.resolve()
        inside = folder.resolve() == out or out in folder.resolve().parents
        if not folder.exists() and not inside:
            raise StudyError(study.source, [("storage", f"cannot reach {shown!r}: folder "
                                                        f"{str(folder)!r} does not exist")])
        if path.exists() and not path.is_file():
            raise StudyError(study.source, [("storage", f"cannot reach {shown!r}: not a file")])
        return
    if url.startswith("sqlite:"):
        return  # in-memory or unusual sqlite forms: let optuna decide
    try:
        import sqlalchemy

        kwargs: dict[str, Any] = {}
        if url.startswith(("postgresql", "mysql")):
            kwargs["connect_args"] = {"connect_timeout": 5}
        engine = sqlalchemy.create_engine(url, **kwargs)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()
    except Exception as exc:  # any driver error means: unreachable
        if type(exc).__name__ in ("NoSuchModuleError", "ArgumentError"):
            scheme = url.split(":", 1)[0]
            raise StudyError(study.source, [("storage", (
                f"unknown storage {shown!r} (scheme {scheme!r}): use sqlite:///FILE, "
                "journal:///FILE or a database URL such as postgresql://USER@HOST/DB"))]) from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        first = mask_password(first.replace(url, shown))
        raise StudyError(study.source, [("storage", f"cannot reach {shown!r}: {first}")]) from None


def _shown(given: str, resolved: str | Path) -> str:
    """A path as the study file gives it and, when they differ, where it resolved to."""
    if str(given) == str(resolved):
        return repr(given)
    return f"{given!r} (resolved relative to the study file: {str(resolved)!r})"


def missing_data(study: Study) -> str | None:
    """Why ``data.source`` cannot be read on this machine (it does not exist), or ``None``."""
    source = study.data["source"]
    if source != "stdlib" and not Path(source).expanduser().exists():
        given = (study.raw.get("data") or {}).get("source", source)
        return f"path does not exist: {_shown(given, source)}"
    return None


def check_files(study: Study, data: bool = True) -> None:
    """Raise :class:`StudyError` listing every input file ``hpo run`` would read that is missing
    or unusable: the data source (``data.source``, with ``data``; :func:`missing_data`) and the
    ``reference`` summary, both relative to the study file. Reads only the reference, a small
    JSON file; nothing is created or modified."""
    errors: list[tuple[str, str]] = []
    why = missing_data(study) if data else None
    if why is not None:
        errors.append(("data.source", why))
    if study.reference is not None:
        shown = _shown(study.raw.get("reference", str(study.reference)), study.reference)
        problem = None
        if not study.reference.is_file():
            problem = "file not found"
        else:
            try:
                ref = json.loads(study.reference.read_text())
            except (OSError, UnicodeDecodeError, ValueError):
                ref = None
            if not isinstance(ref, dict) or "best" not in ref:
                problem = "not a study summary JSON (the summary.json of hpo run --no-prune)"
        if problem:
            errors.append(("reference", f"{problem}: {shown}"))
    if errors:
        raise StudyError(study.source, errors)
