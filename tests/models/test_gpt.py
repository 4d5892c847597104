from __future__ import annotations

import pytest
import torch

from hpo.models import GPT, GPTConfig


def _batch(cfg: GPTConfig, batch: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.context + 1), generator=g)
    return x[:, :-1], x[:, 1:]


@pytest.mark.parametrize("activation", ["gelu", "relu2", "swiglu"])
@pytest.mark.parametrize("position", ["learned", "rope", "alibi"])
def test_gpt_completep_at_multiplier_one_equals_standard(activation: str, position: str) -> None:
    common = dict(width=32, depth=2, heads=4, context=16, base_width=32, base_depth=2,
                  activation=activation, position=position)
    cp = GPTConfig(parametrization="completep", **common)
    sp = GPTConfig(parametrization="sp", **common)
    torch.manual_seed(0)
    m_cp = GPT(cp)
    torch.manual_seed(0)
    m_sp = GPT(sp)
    # same init draws
    for (n1, p1), (n2, p2) in zip(m_cp.named_parameters(), m_sp.named_parameters(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)
    x, y = _batch(cp)
    loss_cp = m_cp(x, y)
    loss_sp = m_sp(x, y)
    # same function
    assert torch.allclose(loss_cp, loss_sp, rtol=0, atol=1e-6)
    # same optimizer settings group by group
    for g1, g2 in zip(m_cp.param_groups(1e-2, 0.1), m_sp.param_groups(1e-2, 0.1), strict=True):
        assert g1["name"] == g2["name"]
        assert (g1["lr"], g1["weight_decay"], g1["eps"]) == pytest.approx(
            (g2["lr"], g2["weight_decay"], g2["eps"]))
    # one AdamW step keeps them equal
    for m in (m_cp, m_sp):
        opt = torch.optim.AdamW(m.param_groups(1e-2, 0.1), betas=(0.9, 0.95))
        m(x, y).backward()
        opt.step()
    for p1, p2 in zip(m_cp.parameters(), m_sp.parameters(), strict=True):
        assert torch.allclose(p1, p2, atol=1e-7)


@pytest.mark.parametrize("parametrization", ["completep", "sp"])
@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_gpt_param_groups_cover_every_parameter_once(
    parametrization: str, activation: str
) -> None:
    cfg = GPTConfig(width=64, depth=4, heads=4, base_width=32, base_depth=2,
                    parametrization=parametrization, activation=activation)
    model = GPT(cfg)
    groups = model.param_groups(3e-3, 0.1)
    seen = [id(p) for g in groups for p in g["params"]]
    # every parameter exactly once
    assert len(seen) == len(set(seen)) == len(list(model.parameters()))
    assert {g["name"] for g in groups} == {
        "embedding", "unembedding", "hidden", "hidden_norm", "final_norm"}


def test_gpt_param_groups_follow_completep_table() -> None:
    cfg = GPTConfig(width=128, depth=4, heads=4, base_width=32, base_depth=2, alpha=1.0)
    model = GPT(cfg)
    m_n, m_l = 4.0, 2.0
    by_name = {g["name"]: g for g in model.param_groups(1e-2, 0.1, eps=1e-8)}
    assert by_name["hidden"]["lr"] == pytest.approx(1e-2 / m_n)
    assert by_name["hidden"]["weight_decay"] == pytest.approx(0.1 * m_n)
    assert by_name["hidden"]["eps"] == pytest.approx(1e-8 / m_n / m_l)
    assert by_name["embedding"]["lr"] == pytest.approx(1e-2)
    assert by_name["embedding"]["eps"] == pytest.approx(1e-8 / m_n)
    assert by_name["hidden_norm"]["lr"] == pytest.approx(1e-2)
    assert by_name["hidden_norm"]["weight_decay"] == 0.0
    # eta_h * lambda_h (and so tau) does not depend on width
    assert by_name["hidden"]["lr"] * by_name["hidden"]["weight_decay"] == pytest.approx(1e-3)
    # depth-muP: hidden LR scales with m_L^(alpha - 1)
    half = GPT(GPTConfig(width=128, depth=4, heads=4, base_width=32, base_depth=2, alpha=0.5))
    eta_h, _ = half.hidden_lr_wd(1e-2, 0.1)
    assert eta_h == pytest.approx(1e-2 / m_n * m_l**-0.5)


def test_gpt_param_group_rejects_unknown_parameter() -> None:
    model = GPT(GPTConfig())
    model.register_parameter("stray", torch.nn.Parameter(torch.zeros(3)))
    with pytest.raises(ValueError, match="stray"):
        model.param_groups(1e-3, 0.0)


def _activation_rms_after_training(
    parametrization: str, width: int, steps: int = 5
) -> list[float]:
    """RMS of each block's output and of the logits after a few AdamW steps."""
    torch.manual_seed(0)
    cfg = GPTConfig(width=width, depth=2, heads=4, context=32, base_width=32, base_depth=2,
                    parametrization=parametrization, activation="gelu")
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.param_groups(1e-2, 0.0), betas=(0.9, 0.95))
    for step in range(steps):
        x, y = _batch(cfg, batch=8, seed=step)
        opt.zero_grad()
        model(x, y).backward()
        opt.step()
    rms: list[float] = []
    hooks = [b.register_forward_hook(lambda m, i, o: rms.append(o.pow(2).mean().sqrt().item()))
             for b in model.blocks]
    hooks.append(model.lm_head.register_forward_hook(
        lambda m, i, o: rms.append(o.pow(2).mean().sqrt().item())))  # the scaled logits
    with torch.no_grad():
        model(_batch(cfg, batch=8, seed=99)[0])
    for h in hooks:
        h.remove()
    return rms


def test_gpt_coordinate_check_completep_stable_sp_grows() -> None:
    widths = [32, 64, 128, 256]
    cp = torch.tensor([_activation_rms_after_training("completep", w) for w in widths])
    sp = torch.tensor([_activation_rms_after_training("sp", w) for w in widths])
    # CompleteP: every layer's activation RMS within 2x across widths 32..256
    ratio_cp = cp.max(dim=0).values / cp.min(dim=0).values
    assert (ratio_cp < 2.0).all(), ratio_cp
    # SP: the same layers grow with width (monotone, and well beyond 2x at the logits)
    assert (sp[1:, -1] > sp[:-1, -1]).all(), sp[:, -1]
    assert sp[-1, -1] / sp[0, -1] > 2.0
    assert (sp[-1] > cp[-1]).all()


def test_gpt_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="width=30"):
        GPTConfig(width=30, heads=4)
    with pytest.raises(ValueError, match="activation='tanh'"):
        GPTConfig(activation="tanh")


def test_gpt_counts_and_flops() -> None:
    cfg = GPTConfig(width=64, depth=2, heads=4, context=32, ffn_ratio=4.0)
    model = GPT(cfg)
    per_block = 4 * 64 * 64 + 2 * 4 * 64 * 64 + 4 * 64  # attn + mlp + 2 LN (gain, bias)
    expected = 256 * 64 * 2 + 32 * 64 + 2 * per_block + 2 * 64
    assert model.num_params() == expected
    assert model.flops_per_token() == 6.0 * (expected - 256 * 64 - 32 * 64) + 12 * 2 * 64 * 32
