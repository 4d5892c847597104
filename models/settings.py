"""The settings of one training run, each declared and validated once: :class:`RunSettings`.

A setting is one field here: its default, its rule, its check, what it does, and where it
lives in a study file (section ``model``, ``recipe`` or ``data``, and its key there when that
differs from its name). Every entry point follows the declarations:
:class:`hpo.models.training.TrainConfig` is a ``RunSettings`` with the hardware, logging and
checkpoint fields added; ``hpo train`` has one flag per setting (``--base-width`` for
``base_width``), its default and help read from here; the study YAML's ``model``, ``recipe`` and
``data`` sections have one key per setting, checked with :meth:`RunSettings.problems`; and
:class:`hpo.models.GPTConfig` takes its shape defaults from :data:`RUN_DEFAULTS`. Adding a
setting is one field (and, where training reads it, the line that does) and its test.

Pure Python: no torch (the study schema and the CLI read it without the ``[train]`` extra).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from numbers import Integral, Real
from pathlib import Path
from typing import Any

__all__ = ["RunSettings", "RUN_DEFAULTS", "ACTIVATIONS", "POSITIONS", "PARAMETRIZATIONS",
           "DEFAULT_TAU", "DEFAULT_MAX_BYTES", "SECTIONS"]

ACTIVATIONS = ("gelu", "relu2", "swiglu")
POSITIONS = ("learned", "rope", "alibi")
PARAMETRIZATIONS = ("completep", "sp")
#: the AdamW timescale of a run given neither tau nor weight_decay
DEFAULT_TAU = 0.2
#: bytes of text read by default: 16 MiB of the standard library loads in well under a second
DEFAULT_MAX_BYTES = 16 * 2**20
#: the study file's sections that hold run settings
SECTIONS = ("model", "recipe", "data")


class _Invalid(Exception):
    """A value breaks its setting's rule."""


def _real(x: Any) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def _count(x: Any) -> int:
    if not (isinstance(x, Integral) and not isinstance(x, bool) and x >= 1):
        raise _Invalid
    return int(x)


def _positive(x: Any) -> float:
    if not (_real(x) and math.isfinite(x) and x > 0):
        raise _Invalid
    return float(x)


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def inner(x: Any) -> Any:
        return None if x is None else check(x)
    return inner


def _one_of(options: tuple[str, ...]) -> Callable[[Any], str]:
    def inner(x: Any) -> str:
        if x not in options:
            raise _Invalid
        return str(x)
    return inner


def _alpha(x: Any) -> float:
    if not (_real(x) and x in (0.5, 1.0)):
        raise _Invalid
    return float(x)


def _non_negative(x: Any) -> float:
    if not (_real(x) and math.isfinite(x) and x >= 0):
        raise _Invalid
    return float(x)


def _schedule(x: Any) -> str:
    from hpo.predictors.schedules import parse_schedule  # numpy and scipy load on use

    if not isinstance(x, str):
        raise _Invalid
    try:
        parse_schedule(x)
    except ValueError:
        raise _Invalid from None
    return x


def _schedule_rule() -> str:
    from hpo.predictors.schedules import SCHEDULE_RULE

    return SCHEDULE_RULE


def _warmup(x: Any) -> float:
    if not (_real(x) and math.isfinite(x) and x >= 0 and (x < 1 or x == int(x))):
        raise _Invalid
    return float(x)


def _seed(x: Any) -> int:
    if not (isinstance(x, Integral) and not isinstance(x, bool) and x >= 0):
        raise _Invalid
    return int(x)


def _fraction(x: Any) -> float:
    if not (_real(x) and 0 < x < 1):
        raise _Invalid
    return float(x)


def _data(x: Any) -> str:
    if not isinstance(x, (str, Path)) or not str(x):
        raise _Invalid
    return str(x)


def _setting(default: Any, section: str, rule: str, check: Callable[[Any], Any], doc: str,
             key: str | None = None) -> Any:
    """A field of :class:`RunSettings`: its default, its study-file ``section`` (and ``key``
    there: default its name, ``""`` for none), its rule (worded to follow its name; a function
    returning it where the words load with a heavier module), the check that returns the value
    or raises ``_Invalid``, and what it does. The constructor,
    ``hpo train``'s flags and the study schema read all of them from here."""
    return field(default=default, metadata={"section": section, "rule": rule,
                                            "check": check, "doc": doc, "key": key})


@dataclass
class RunSettings:
    """The model shape, the recipe and the data of one training run, each declared and
    validated once, here. Raises ``ValueError`` naming the first bad setting and its value
    (``"tpp must be a finite number > 0, but got tpp=-1.0."``), or the two settings that do
    not fit together."""

    # model shape (hpo.models.GPTConfig)
    width: int = _setting(64, "model", "a positive integer", _count, "model width d_model")
    depth: int = _setting(2, "model", "a positive integer", _count, "transformer blocks L")
    heads: int = _setting(4, "model", "a positive integer", _count,
                          "attention heads; must divide the width")
    context: int = _setting(64, "model", "a positive integer", _count,
                            "sequence length in tokens")
    ffn_ratio: float = _setting(4.0, "model", "a finite number > 0", _positive,
                                "FFN hidden size / width")
    activation: str = _setting("relu2", "model", f"one of {', '.join(ACTIVATIONS)}",
                               _one_of(ACTIVATIONS),
                               "FFN activation: gelu, relu2 (squared ReLU) or swiglu")
    position: str = _setting("learned", "model", f"one of {', '.join(POSITIONS)}",
                             _one_of(POSITIONS), "position encoding: learned, rope or alibi")
    parametrization: str = _setting(
        "completep", "model", f"one of {', '.join(PARAMETRIZATIONS)}",
        _one_of(PARAMETRIZATIONS),
        "completep (width/depth transfer) or sp (standard: lr and weight_decay applied as "
        "given)")
    base_width: int = _setting(32, "model", "a positive integer", _count,
                               "width at which lr and weight_decay are given")
    base_depth: int = _setting(2, "model", "a positive integer", _count,
                               "depth at which lr and weight_decay are given")
    alpha: float = _setting(1.0, "model", "1 (CompleteP) or 0.5 (depth-muP)", _alpha,
                            "CompleteP depth exponent: 1 (CompleteP) or 0.5 (depth-muP)")
    # recipe
    tpp: float = _setting(20.0, "recipe", "a finite number > 0", _positive,
                          "tokens per parameter D / N, N = all parameters")
    tau: float | None = _setting(
        None, "recipe", "a finite number > 0", _optional(_positive),
        f"AdamW timescale 1 / (eta_h lambda_h T); sets the weight decay (None: {DEFAULT_TAU} "
        "unless weight_decay is given)")
    weight_decay: float | None = _setting(
        None, "recipe", "a finite number >= 0", _optional(_non_negative),
        "base decoupled weight decay lambda (torch AdamW), instead of tau")
    lr: float = _setting(0.01, "recipe", "a finite number > 0", _positive,
                         "BASE peak LR eta at base_width and base_depth; hidden weights get "
                         "lr * base_width / width under CompleteP")
    batch_tokens: int = _setting(2048, "recipe", "a positive integer", _count,
                                 "tokens per optimizer step B, a multiple of the context")
    schedule: str = _setting(
        "linear", "recipe", _schedule_rule, _schedule,
        "LR schedule: linear (decay to zero), cosine, cosine:F (to F x peak), wsd:linear:F or "
        "wsd:sqrt:F (cooldown over the last fraction F), constant")
    warmup: float = _setting(0.05, "recipe",
                             "a fraction in [0, 1) or a whole number of steps >= 1", _warmup,
                             "linear warmup: < 1 a fraction of the steps, >= 1 a number of "
                             "steps")
    grad_clip: float | None = _setting(None, "recipe", "a finite number > 0",
                                       _optional(_positive),
                                       "clip the global gradient norm to this (None: no "
                                       "clipping)")
    seed: int = _setting(0, "recipe", "an integer >= 0", _seed,
                         "seed of model init and batch order", key="")
    # data
    data: str = _setting(
        "stdlib", "data", "'stdlib' or a path", _data,
        "'stdlib' (bytes of this Python's standard library), a text file or folder (bytes), a "
        "uint16 .bin token file or a folder with train.bin [val.bin]", key="source")
    val_fraction: float = _setting(0.1, "data", "in (0, 1)", _fraction,
                                   "share of the data held out for validation")
    max_data_bytes: int | None = _setting(
        DEFAULT_MAX_BYTES, "data", "a positive integer", _optional(_count),
        "read at most this many bytes of text (None: all)", key="max_bytes")
    eval_batches: int = _setting(4, "data", "a positive integer", _count,
                                 "val batches of batch_tokens per evaluation")

    def __post_init__(self) -> None:
        for _, why in self.problems({name: getattr(self, name) for name in self.names()}):
            raise ValueError(why)

    @staticmethod
    def names() -> tuple[str, ...]:
        """The settings' names, in declaration order."""
        return tuple(_declared())

    @staticmethod
    def defaults() -> dict[str, Any]:
        """Each setting's default, by name."""
        return {name: f.default for name, f in _declared().items()}

    @staticmethod
    def declared(name: str) -> Mapping[str, Any]:
        """The declaration of ``name``: ``section``, ``key`` (its key in the study file's
        section; ``""``: not a key there), ``rule``, ``doc`` and ``default``. ``KeyError`` for
        an unknown name."""
        f = _declared()[name]
        key = f.metadata["key"]
        return {**f.metadata, "key": name if key is None else key, "default": f.default,
                "rule": _rule(f.metadata)}

    @staticmethod
    def in_section(section: str) -> dict[str, str]:
        """The settings of the study file's ``section``, by their key there: key -> name."""
        out = {}
        for name in _declared():
            decl = RunSettings.declared(name)
            if decl["section"] == section and decl["key"]:
                out[decl["key"]] = name
        return out

    @staticmethod
    def from_sections(sections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The settings given in a study's ``sections`` (section -> key -> value), by name,
        numbers as their declared type (a YAML ``tpp: 80`` is the float 80.0)."""
        out: dict[str, Any] = {}
        for section, given in sections.items():
            for key, name in RunSettings.in_section(section).items():
                if key in given:
                    value = given[key]
                    kind = str(_declared()[name].type).split(" |")[0]
                    if value is not None and kind in ("int", "float") and _real(value):
                        value = int(value) if kind == "int" else float(value)
                    out[name] = value
        return out

    @staticmethod
    def check_field(name: str, value: Any) -> str | None:
        """``None`` when ``value`` is valid for the setting ``name``; else why not, worded for a
        schema line: ``"must be a finite number > 0, got -1"``."""
        meta = _declared()[name].metadata
        try:
            meta["check"](value)
        except _Invalid:
            return f"must be {_rule(meta)}, got {value!r}"
        return None

    @staticmethod
    def problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Every problem of ``values`` (settings by name; missing ones are not checked), as
        ``(name, message)``: each value against its rule (``"tpp must be a finite number > 0,
        but got tpp=-1.0."``), then the settings that must fit together (the width and the
        heads, the batch and the context, tau and weight_decay), where both are valid."""
        out = []
        bad = set()
        for name, value in values.items():
            meta = _declared()[name].metadata
            try:
                meta["check"](value)
            except _Invalid:
                bad.add(name)
                out.append((name, f"{name} must be {_rule(meta)}, but got {name}={value!r}."))

        def both(a: str, b: str) -> bool:
            return a in values and b in values and not {a, b} & bad

        if both("width", "heads") and values["width"] % values["heads"]:
            out.append(("width", f"width must be divisible by heads, but got "
                                 f"width={values['width']} and heads={values['heads']}."))
        if both("batch_tokens", "context") and values["batch_tokens"] % values["context"]:
            out.append(("batch_tokens", f"batch_tokens must be a multiple of context, but got "
                                        f"batch_tokens={values['batch_tokens']} and "
                                        f"context={values['context']}."))
        if both("tau", "weight_decay") and values["tau"] is not None \
                and values["weight_decay"] is not None:
            out.append(("tau", f"give either tau or weight_decay, not both, but got "
                               f"tau={values['tau']!r} and "
                               f"weight_decay={values['weight_decay']!r}."))
        return out


def _rule(meta: Mapping[str, Any]) -> str:
    """A declaration's rule, its words."""
    rule = meta["rule"]
    return rule() if callable(rule) else rule


#: each setting's default, by name
RUN_DEFAULTS: dict[str, Any] = {}


@functools.cache
def _declared() -> dict[str, Field]:
    """The declared settings, by name in declaration order: read once from the fields."""
    return {f.name: f for f in fields(RunSettings)}


RUN_DEFAULTS.update(RunSettings.defaults())
