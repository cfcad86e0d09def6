"""Layer modules: reduced-width specs, forward conventions, determinism, building blocks."""

from __future__ import annotations

import pytest
import torch

from planner.core.errors import InputError
from planner.core.hf_config import load_model
from profiler.layers import build_layer, layer_input, loss_fn, router_weight, scaled_model
from profiler.layers.linear_attention import CHUNK, chunked_gated_linear_attention

TINY = 1 / 64
SHIPPED = ("qwen3-next-80b-a3b", "deepseek-v3", "llama3-8b", "qwen3-30b-a3b")


def _types(model):
    seen = {}
    for layer in model.layers:
        seen.setdefault(layer.type_key, layer)
    return seen.values()


@pytest.mark.parametrize("name", SHIPPED)
def test_scaled_model_keeps_ratios(name):
    model = load_model(name)
    spec = scaled_model(model, 1 / 16)
    assert spec.layers == model.layers
    assert spec.hidden == round(model.hidden / 16) and spec.vocab == round(model.vocab / 16)
    if model.attention:
        a, b = model.attention, spec.attention
        assert b.num_heads // b.num_kv_heads == a.num_heads // a.num_kv_heads
        # heads x head_dim shrinks like hidden (within rounding)
        ratio = (b.num_heads * b.head_dim / spec.hidden) / (a.num_heads * a.head_dim / model.hidden)
        assert 0.5 < ratio < 2
    if model.moe:
        assert spec.moe.num_experts == round(model.moe.num_experts / 16)
        assert 1 <= spec.moe.top_k <= spec.moe.num_experts
    assert scaled_model(model, 1.0) is model


def test_scaled_model_floors_counts_and_refuses_widths_under_their_minimum():
    spec = scaled_model(load_model("deepseek-v3"), 0.003)  # 0.77 experts, 0.024 of top-k
    assert spec.mla.num_heads >= 1 and spec.moe.top_k == 1 and spec.moe.num_experts == 2
    assert spec.mla.qk_rope_head_dim >= 2 and spec.mla.qk_rope_head_dim % 2 == 0
    with pytest.raises(InputError, match=r"--scale: 0.0001 is too small for deepseek-v3: its kv_lora_rank \(512\) "
                                         r"would be 0.0512 wide, under the minimum 1 \(use --scale 0.002 or more\)"):
        scaled_model(load_model("deepseek-v3"), 1e-4)


@pytest.mark.parametrize("scale", [0.0, -1.0, 1.5])
def test_scaled_model_rejects_bad_scale(scale):
    with pytest.raises(InputError, match="--scale"):
        scaled_model(load_model("llama3-8b"), scale)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_layer_type_runs_forward_and_backward(name):
    model = load_model(name)
    spec = scaled_model(model, TINY)
    for layer in _types(model):
        module = build_layer(model, layer, scale=TINY)
        x = layer_input(model, layer, scale=TINY, batch=2, seq_len=24)
        if x.is_floating_point():
            x.requires_grad_(True)
        y = module(x)
        if layer.role == "head":
            assert y.shape == (2, 24, spec.vocab)
            out = loss_fn(y, torch.zeros(2, 24, dtype=torch.long))
            assert out.dim() == 0
        else:
            assert y.shape == (2, 24, spec.hidden)
            out = y.square().mean()
        out.backward()
        assert torch.isfinite(y).all()
        assert all(p.grad is not None for p in module.parameters() if p.requires_grad), layer.type_key


def test_build_is_deterministic_and_seeded():
    model = load_model("qwen3-next-80b-a3b")
    layer = model.layers[1]
    a, b = build_layer(model, layer, scale=TINY), build_layer(model, layer, scale=TINY)
    c = build_layer(model, layer, scale=TINY, seed=1)
    for (na, pa), (_, pb), (_, pc) in zip(a.named_parameters(), b.named_parameters(), c.named_parameters()):
        assert torch.equal(pa, pb), na
        if pa.dim() > 1:
            assert not torch.equal(pa, pc), na


def test_build_layer_dtype():
    model = load_model("llama3-8b")
    module = build_layer(model, model.layers[1], scale=TINY, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in module.parameters())


@pytest.mark.parametrize("index", [1, -2])
def test_router_weight_matches_built_layer(index):
    model = load_model("deepseek-v3")
    layer = model.layers[model.num_layers + index if index < 0 else 4]
    module = build_layer(model, layer, scale=TINY)
    moe = module.block.moe if layer.role == "mtp" else module.moe
    assert torch.equal(moe.router.weight, router_weight(model, layer, scale=TINY))


def test_mtp_loss_reaches_its_head():
    model = load_model("deepseek-v3")
    layer = model.layers[-2]
    assert layer.role == "mtp"
    module = build_layer(model, layer, scale=TINY)
    x = layer_input(model, layer, scale=TINY, batch=1, seq_len=16).requires_grad_(True)
    y = module(x)
    assert torch.equal(y.detach(), x.detach())  # hidden passes through
    y.sum().backward()
    assert module.head.lm_head.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("T", [CHUNK, CHUNK + 5, 3])
def test_chunked_linear_attention_matches_recurrence(T):
    gen = torch.Generator().manual_seed(0)
    B, H, dk, dv = 1, 2, 4, 3
    q, k = torch.randn(B, H, T, dk, generator=gen), torch.randn(B, H, T, dk, generator=gen)
    v = torch.randn(B, H, T, dv, generator=gen)
    g = -torch.rand(B, H, T, generator=gen)
    out = chunked_gated_linear_attention(q, k, v, g)
    state = torch.zeros(B, H, dk, dv)
    ref = []
    for t in range(T):
        state = state * g[:, :, t].exp()[..., None, None] + k[:, :, t, :, None] * v[:, :, t, None, :]
        ref.append((q[:, :, t, None, :] @ state).squeeze(-2))
    torch.testing.assert_close(out, torch.stack(ref, dim=2), rtol=1e-4, atol=1e-5)
