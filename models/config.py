"""Model configuration: one dataclass, derived multipliers computed in one place."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hpo.models.settings import ACTIVATIONS, PARAMETRIZATIONS, POSITIONS, RUN_DEFAULTS

__all__ = ["GPTConfig", "ACTIVATIONS", "POSITIONS", "PARAMETRIZATIONS"]


@dataclass
class GPTConfig:
    """Shape and parametrization of a decoder-only GPT (pre-LN, untied embeddings).

    Raises ``ValueError`` naming the field and the value for any inconsistent setting.
    """

    # the shape's defaults are the run settings' (hpo.models.settings.RunSettings)
    vocab_size: int = 256  # byte-level tokens by default
    context: int = RUN_DEFAULTS["context"]  # maximum sequence length
    width: int = RUN_DEFAULTS["width"]  # d_model
    depth: int = RUN_DEFAULTS["depth"]  # number of transformer blocks
    heads: int = RUN_DEFAULTS["heads"]  # attention heads
    head_dim: int | None = None  # per-head size; None -> width // heads
    ffn_ratio: float = RUN_DEFAULTS["ffn_ratio"]  # FFN hidden size / width (swiglu: of each)
    activation: str = RUN_DEFAULTS["activation"]  # gelu | relu2 (squared ReLU) | swiglu
    position: str = RUN_DEFAULTS["position"]  # learned | rope | alibi
    parametrization: str = RUN_DEFAULTS["parametrization"]  # completep | sp (standard)
    alpha: float = RUN_DEFAULTS["alpha"]  # CompleteP depth exponent: 1 or 0.5 (depth-muP)
    base_width: int = RUN_DEFAULTS["base_width"]  # d_base: width where base LR / init are tuned
    base_depth: int = RUN_DEFAULTS["base_depth"]  # L_base
    init_std: float = 0.02  # sigma: init std at base width
    output_mult: float = 1.0  # alpha_out: logit multiplier at base width
    ln_bias: bool = True  # LayerNorm with a bias term
    extra: dict = field(default_factory=dict)  # free-form metadata, carried along

    def __post_init__(self) -> None:
        def bad(name: str, value: object, why: str) -> ValueError:
            return ValueError(f"{name} must be {why}, but got {name}={value!r}.")

        for name in ("vocab_size", "context", "width", "depth", "heads", "base_width",
                     "base_depth"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise bad(name, value, "a positive integer")
        if self.activation not in ACTIVATIONS:
            raise bad("activation", self.activation, f"one of {', '.join(ACTIVATIONS)}")
        if self.position not in POSITIONS:
            raise bad("position", self.position, f"one of {', '.join(POSITIONS)}")
        if self.parametrization not in PARAMETRIZATIONS:
            raise bad("parametrization", self.parametrization,
                      f"one of {', '.join(PARAMETRIZATIONS)}")
        if self.alpha not in (0.5, 1.0):
            raise bad("alpha", self.alpha, "1 (CompleteP) or 0.5 (depth-muP)")
        if self.head_dim is None:
            if self.width % self.heads != 0:
                raise ValueError(
                    f"width must be divisible by heads, but got width={self.width} "
                    f"and heads={self.heads}."
                )
            self.head_dim = self.width // self.heads
        elif self.head_dim <= 0:
            raise bad("head_dim", self.head_dim, "a positive integer")
        if self.position == "rope" and self.head_dim % 2:
            raise bad("head_dim", self.head_dim, "even for rope")
        if not self.ffn_ratio > 0:
            raise bad("ffn_ratio", self.ffn_ratio, "> 0")
        if not self.init_std > 0:
            raise bad("init_std", self.init_std, "> 0")

    # ---- derived values (one place) -------------------------------------------------------
    @property
    def width_mult(self) -> float:
        """m_N = d / d_base (1 under standard parametrization)."""
        return self.width / self.base_width if self.parametrization == "completep" else 1.0

    @property
    def depth_mult(self) -> float:
        """m_L = L / L_base (1 under standard parametrization)."""
        return self.depth / self.base_depth if self.parametrization == "completep" else 1.0

    @property
    def base_head_dim(self) -> int:
        """Head size at base width (heads fixed, so it scales with width)."""
        assert self.head_dim is not None
        return max(1, round(self.head_dim / (self.width / self.base_width)))

    @property
    def ffn_hidden(self) -> int:
        return max(1, int(round(self.ffn_ratio * self.width)))

    def to_dict(self) -> dict:
        return asdict(self)
