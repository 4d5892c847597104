"""A decoder-only GPT with the CompleteP parametrization (Dey et al. 2025, "Don't be lazy").

Pre-LN blocks, untied input and output embeddings, activation ``gelu`` / ``relu2`` / ``swiglu``,
position encoding ``learned`` / ``rope`` / ``alibi``.

CompleteP (``parametrization="completep"``), with width multiplier m_N = d / d_base, depth
multiplier m_L = L / L_base and depth exponent alpha (1 = CompleteP, 1/2 = depth-muP):

=====================================  ======================================================
what                                   rule
=====================================  ======================================================
residual branch                        x <- x + m_L^-alpha * f(x)
hidden weight init std                 sigma / sqrt(m_N)          (embeddings, unembedding: sigma)
output logits                          multiplied by alpha_out / m_N
attention scale                        sqrt(d_head_base) / d_head (1 / d_head up to a constant,
                                       equal to 1 / sqrt(d_head) at base width)
hidden weight LR                       eta * m_N^-1 * m_L^(alpha-1)
hidden LayerNorm gains and biases LR   eta * m_L^(alpha-1)
embedding, unembedding, final norm LR  eta
hidden weight decay                    lambda * m_N  (so eta_h * lambda_h, hence tau, is
                                       width-invariant); embeddings lambda; norms 0
AdamW eps                              eps / m_N for (un)embeddings; eps / m_N * m_L^-alpha for
                                       hidden weights; eps * m_L^-alpha for hidden norms
=====================================  ======================================================

Under standard parametrization (``"sp"``) every multiplier is 1: every weight has init std sigma,
the attention scale is 1 / sqrt(d_head), and every group has LR eta and eps eps. At m_N = m_L = 1
the two parametrizations define the same function, init and optimizer.
"""

from __future__ import annotations

import math

from hpo._extras import require

require("torch", "train")
import torch
import torch.nn.functional as F
from torch import nn

from hpo.models.config import GPTConfig
from hpo.models.recipe import hidden_lr_wd

__all__ = ["GPT"]


def _rope_tables(context: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, ...]:
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(context, dtype=torch.float32), inv_freq)  # (T, hd/2)
    return angles.cos(), angles.sin()


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (B, H, T, hd); rotate pairs (x1, x2) of the two halves
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[: x.size(-2)].to(x.dtype), sin[: x.size(-2)].to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def _alibi_bias(context: int, heads: int) -> torch.Tensor:
    """(H, T, T) additive attention bias: -slope_h * (i - j) below the diagonal, -inf above."""
    closest = 2 ** math.floor(math.log2(heads))
    slopes = [2 ** (-8 * (i + 1) / closest) for i in range(closest)]
    if closest < heads:  # interleave extra slopes as in Press et al.
        extra = [2 ** (-4 * (2 * i + 1) / closest) for i in range(heads - closest)]
        slopes += extra
    pos = torch.arange(context)
    dist = (pos[:, None] - pos[None, :]).float()  # (T, T) i - j
    bias = -torch.tensor(slopes)[:, None, None] * dist
    return bias.masked_fill(dist < 0, float("-inf"))


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        assert cfg.head_dim is not None
        self.heads, self.head_dim, self.position = cfg.heads, cfg.head_dim, cfg.position
        inner = cfg.heads * cfg.head_dim
        self.qkv = nn.Linear(cfg.width, 3 * inner, bias=False)
        self.proj = nn.Linear(inner, cfg.width, bias=False)
        if cfg.parametrization == "completep":
            self.scale = math.sqrt(cfg.base_head_dim) / cfg.head_dim
        else:
            self.scale = 1.0 / math.sqrt(cfg.head_dim)
        if cfg.position == "rope":
            cos, sin = _rope_tables(cfg.context, cfg.head_dim)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        elif cfg.position == "alibi":
            self.register_buffer("alibi", _alibi_bias(cfg.context, cfg.heads), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape  # (B, T, C)
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        # q, k, v: (B, H, T, hd)
        if self.position == "rope":
            q = _apply_rope(q, self.rope_cos, self.rope_sin)
            k = _apply_rope(k, self.rope_cos, self.rope_sin)
        if self.position == "alibi":
            mask = self.alibi[:, :T, :T].to(q.dtype)  # (H, T, T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))  # (B, T, C)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.activation = cfg.activation
        hidden = cfg.ffn_hidden
        self.fc = nn.Linear(cfg.width, hidden, bias=False)
        if cfg.activation == "swiglu":
            self.gate = nn.Linear(cfg.width, hidden, bias=False)
        self.proj = nn.Linear(hidden, cfg.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)  # (B, T, hidden)
        if self.activation == "gelu":
            h = F.gelu(h)
        elif self.activation == "relu2":
            h = F.relu(h).square()
        else:  # swiglu
            h = F.silu(self.gate(x)) * h
        return self.proj(h)  # (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.width, bias=cfg.ln_bias)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.width, bias=cfg.ln_bias)
        self.mlp = MLP(cfg)
        self.branch_scale = cfg.depth_mult ** (-cfg.alpha)  # m_L^-alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.branch_scale * self.attn(self.ln1(x))
        return x + self.branch_scale * self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only GPT; see the module docstring for the parametrization table."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.width)
        self.wpe = nn.Embedding(cfg.context, cfg.width) if cfg.position == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.ln_f = nn.LayerNorm(cfg.width, bias=cfg.ln_bias)
        self.lm_head = nn.Linear(cfg.width, cfg.vocab_size, bias=False)
        self.logit_mult = cfg.output_mult / cfg.width_mult  # alpha_out / m_N
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Init: embeddings and unembedding N(0, sigma^2); hidden weights N(0, sigma^2 / m_N);
        LayerNorm gains 1, biases 0."""
        sigma = self.cfg.init_std
        hidden_std = sigma / math.sqrt(self.cfg.width_mult)
        for name, p in self.named_parameters():
            kind = self._kind(name)
            if kind in ("embedding", "unembedding"):
                nn.init.normal_(p, 0.0, sigma)
            elif kind == "hidden":
                nn.init.normal_(p, 0.0, hidden_std)
            elif name.endswith("weight"):  # norm gains
                nn.init.ones_(p)
            else:  # norm biases
                nn.init.zeros_(p)

    @staticmethod
    def _kind(name: str) -> str:
        """Which optimizer group a parameter belongs to; raises on anything unrecognised."""
        if name.startswith(("wte.", "wpe.")):
            return "embedding"
        if name.startswith("lm_head."):
            return "unembedding"
        if name.startswith("ln_f."):
            return "final_norm"
        if name.startswith("blocks."):
            if ".ln1." in name or ".ln2." in name:
                return "hidden_norm"
            if name.endswith(".weight"):
                return "hidden"
        raise ValueError(f"parameter {name!r} has no optimizer group in the CompleteP table")

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """The logits ``(B, T, V)`` of ``idx`` ``(B, T)``; with ``targets`` ``(B, T)``, their mean
        cross entropy instead (computed in float32), so a training step keeps no ``B x T x V``
        tensor beyond what the backward pass needs, and a compiled step writes no logits."""
        B, T = idx.shape  # (B, T)
        if T > self.cfg.context:
            raise ValueError(f"sequence length {T} exceeds context={self.cfg.context}")
        x = self.wte(idx)  # (B, T, C)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x)  # (B, T, C)
        if self.logit_mult != 1.0:
            # alpha_out / m_N on the head's input: the same logits (the head is linear, without
            # bias) for a multiply over C features instead of over the V-token vocabulary
            h = h * self.logit_mult
        logits = self.lm_head(h)  # (B, T, V)
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().flatten(0, 1), targets.reshape(-1))

    # ---- optimizer ---------------------------------------------------------------------------
    def hidden_lr_wd(self, lr: float, weight_decay: float) -> tuple[float, float]:
        """(eta_h, lambda_h): the LR and weight decay applied to hidden weights for base LR ``lr``
        and base weight decay ``weight_decay`` (both as at base width and depth)."""
        cfg = self.cfg
        return hidden_lr_wd(lr, weight_decay, cfg.width_mult, cfg.depth_mult, cfg.alpha)

    def param_groups(self, lr: float, weight_decay: float, eps: float = 1e-8) -> list[dict]:
        """AdamW parameter groups with per-group ``lr``, ``weight_decay`` and ``eps``.

        ``lr`` is the base LR eta and ``weight_decay`` the base decoupled weight decay lambda
        (torch AdamW semantics), both as tuned at base width and depth; the CompleteP multipliers
        of the module table are applied here. Every parameter lands in exactly one group
        (asserted). Each group also records its peak LR under ``"peak_lr"`` for schedulers.
        """
        m_n, m_l, alpha = self.cfg.width_mult, self.cfg.depth_mult, self.cfg.alpha
        eta_h, lam_h = self.hidden_lr_wd(lr, weight_decay)
        settings = {
            "embedding": (lr, weight_decay, eps / m_n),
            "unembedding": (lr, weight_decay, eps / m_n),
            "hidden": (eta_h, lam_h, eps / m_n * m_l ** (-alpha)),
            "hidden_norm": (lr * m_l ** (alpha - 1), 0.0, eps * m_l ** (-alpha)),
            "final_norm": (lr, 0.0, eps),
        }
        members: dict[str, list[nn.Parameter]] = {k: [] for k in settings}
        for name, p in self.named_parameters():
            members[self._kind(name)].append(p)
        groups = [
            {"name": k, "params": ps, "lr": settings[k][0], "peak_lr": settings[k][0],
             "weight_decay": settings[k][1], "eps": settings[k][2]}
            for k, ps in members.items() if ps
        ]
        n_grouped = sum(len(g["params"]) for g in groups)
        ids = {id(p) for g in groups for p in g["params"]}
        n_params = len(list(self.parameters()))
        assert n_grouped == len(ids) == n_params, "every parameter must be in exactly one group"
        return groups

    # ---- accounting --------------------------------------------------------------------------
    def num_params(self) -> int:
        """N: every parameter, embeddings (input, position, output) included."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 * (matmul params) + 12 * L * H * d_head * context
        (PaLM appendix B); input and position embedding lookups are not matmuls."""
        cfg = self.cfg
        n_lookup = self.wte.weight.numel() + (self.wpe.weight.numel() if self.wpe else 0)
        assert cfg.head_dim is not None
        attn = 12 * cfg.depth * cfg.heads * cfg.head_dim * cfg.context
        return 6.0 * (self.num_params() - n_lookup) + attn
