"""Dynamics models: streaming equals the training forward, per-world resets, presets and gradients (tiny sizes)."""

from __future__ import annotations

import pytest
import torch

from flashnerd.models import (
    FLASHNERD_SIZES,
    NERD_SIZES,
    RWM,
    FlashNeRD,
    FlashNeRDConfig,
    NeRD,
    NeRDConfig,
    RWMConfig,
    build_model,
)
from flashnerd.models.flashnerd import attend_slots

IN, OUT = 7, 5


def _flashnerd(span: int = 3, n_layer: int = 3) -> FlashNeRD:
    torch.manual_seed(0)
    model = FlashNeRD(FlashNeRDConfig(IN, OUT, n_layer=n_layer, n_head=2, n_embd=16, span=span, readout_hidden=16))
    with torch.no_grad():  # non-zero lag biases so the relative-position path is exercised
        for block in model.blocks:
            block.lag_bias.normal_()
    return _perturb(model)


def _nerd(window: int = 4) -> NeRD:
    torch.manual_seed(0)
    return _perturb(NeRD(NeRDConfig(IN, OUT, n_layer=2, n_head=2, n_embd=16, window=window, head_hidden=8)))


def _perturb(model: torch.nn.Module) -> torch.nn.Module:
    """Larger random weights than the 0.02 init, so q.k scores are O(1) and a wrong key or value shows up."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


@torch.no_grad()
def _stream(model, x: torch.Tensor, cache=None) -> torch.Tensor:
    """Step `model` frame by frame over x (B, T, IN) -> (B, T, OUT)."""
    cache = model.init_cache(x.shape[0]) if cache is None else cache
    return torch.stack([model.step(x[:, t], cache) for t in range(x.shape[1])], dim=1)


def test_flashnerd_streaming_equals_forward_with_wrapping_ring_buffer():
    S, L, T = 3, 3, 20
    assert T > S and T > L * S  # the ring buffer wraps several times and the receptive field saturates
    model = _flashnerd(span=S, n_layer=L)
    x = torch.randn(3, T, IN)
    cache = model.init_cache(3)
    ptrs, ys = [], []
    with torch.no_grad():
        full = model(x)  # (B, T, OUT)
        for t in range(T):
            ys.append(model.step(x[:, t], cache))
            ptrs.append(cache.ptr)
    streamed = torch.stack(ys, dim=1)
    assert ptrs.count(0) >= 3  # wrapped at least three times
    assert torch.equal(cache.count, torch.full((3,), S))
    torch.testing.assert_close(streamed, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(streamed[:, L * S :], full[:, L * S :], atol=1e-5, rtol=0)  # after many wraps


def test_flashnerd_chunked_streaming_equals_the_training_pass():
    """A batch streamed in chunks (uneven: 11 worlds in chunks of 4) equals the whole-window forward pass of every
    world, with the ring buffer wrapping and one world reset midway (its stream then restarts)."""
    model = _flashnerd(span=3, n_layer=2)
    model.cpu_chunk = 4
    x = torch.randn(11, 14, IN)
    cache = model.init_cache(11)
    with torch.no_grad():
        first = _stream(model, x[:, :7], cache)
        model.reset_cache(cache, torch.tensor([5]))
        second = _stream(model, x[:, 7:], cache)
        full = model(x)
        restarted = model(x[5:6, 7:])
    torch.testing.assert_close(first, full[:, :7], atol=1e-5, rtol=0)
    keep = [i for i in range(11) if i != 5]
    torch.testing.assert_close(second[keep], full[keep, 7:], atol=1e-5, rtol=0)
    torch.testing.assert_close(second[5:6], restarted, atol=1e-5, rtol=0)


def test_flashnerd_compiled_streaming_equals_the_training_pass():
    """`compile_streaming` (planning) fuses the attention between each block's projections; the stream still equals
    the whole-window forward pass, the ring buffer wrapping and the first frames masked."""
    model = _flashnerd(span=3, n_layer=2)
    x = torch.randn(5, 11, IN)
    with torch.no_grad():
        full = model(x)
    model.compile_streaming()
    assert all(block.attend is not attend_slots for block in model.blocks)  # the compiled form runs
    torch.testing.assert_close(_stream(model, x), full, atol=1e-5, rtol=0)


def test_flashnerd_lag_bias_matters():
    # Guards the test above: changing one lag's bias changes the output, so equality is not vacuous.
    model = _flashnerd()
    x = torch.randn(2, 8, IN)
    with torch.no_grad():
        before = model(x)
        model.blocks[0].lag_bias[:, 2] += 1.0
        after = model(x)
    assert not torch.allclose(before, after, atol=1e-5)


def test_nerd_streaming_equals_forward_over_prefix_then_window():
    W, T = 4, 11
    model = _nerd(window=W)
    x = torch.randn(3, T, IN)
    streamed = _stream(model, x)
    with torch.no_grad():
        for t in range(T):
            ref = model(x[:, : t + 1])[:, -1] if t < W else model(x[:, t - W + 1 : t + 1])[:, -1]
            torch.testing.assert_close(streamed[:, t], ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("make", [_flashnerd, _nerd], ids=["flashnerd", "nerd"])
def test_reset_clears_only_the_chosen_world(make):
    model = make()
    B, before, after, w = 5, 7, 9, 3
    x = torch.randn(B, before + after, IN)
    reference = _stream(model, x)  # no reset at all

    cache = model.init_cache(B)
    first = _stream(model, x[:, :before], cache)
    snapshot = {k: v.clone() for k, v in vars(cache).items() if isinstance(v, torch.Tensor)}
    model.reset_cache(cache, torch.tensor([w]))
    others = torch.arange(B) != w
    for name, old in snapshot.items():  # FlashNeRD k/v are (L, S+1, B, H, D), everything else is (B, ...)
        dim = 2 if old.dim() == 5 else 0
        assert torch.equal(
            getattr(cache, name).index_select(dim, others.nonzero()[:, 0]),
            old.index_select(dim, others.nonzero()[:, 0]),
        ), name
    assert cache.count[w] == 0
    second = _stream(model, x[:, before:], cache)

    assert torch.equal(first, reference[:, :before])
    assert torch.equal(second[others], reference[others, before:])
    fresh = _stream(model, x[:, before:])
    torch.testing.assert_close(second[w], fresh[w], atol=1e-5, rtol=0)
    assert not torch.allclose(second[w], reference[w, before:], atol=1e-5)  # the reset did forget world w's past


def test_build_model_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown model 'x'; choose one of: flashnerd, nerd"):
        build_model("x", IN, OUT)


@pytest.mark.parametrize("kind,sizes", [("flashnerd", FLASHNERD_SIZES), ("nerd", NERD_SIZES)])
def test_size_presets_construct(kind, sizes):
    assert {"cpu", "paper_small", "paper"} <= set(sizes)
    for size in sizes:
        model = build_model(kind, IN, OUT, size=size)
        assert len(model.blocks) == model.config.n_layer == sizes[size]["n_layer"]
        with torch.no_grad():
            assert model(torch.randn(1, 2, IN)).shape == (1, 2, OUT)


def test_paper_nerd_size_and_overrides():
    model = build_model("nerd", IN, OUT, size="paper")
    c = model.config
    assert (c.n_layer, c.n_head, c.n_embd) == (6, 12, 384) and len(model.blocks) == 6
    assert model.blocks[0].attn.n_head == 12 and model.embed.out_features == 384
    assert build_model("flashnerd", IN, OUT, span=2).config.span == 2


@pytest.mark.parametrize("make", [_flashnerd, _nerd], ids=["flashnerd", "nerd"])
def test_gradients_flow_to_every_parameter(make):
    model = make().train()
    model(torch.randn(2, 4, IN)).pow(2).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def _rwm() -> RWM:
    torch.manual_seed(0)
    return _perturb(RWM(RWMConfig(IN, OUT, n_layer=2, hidden=16, head_hidden=8, num_contacts=3)))


def test_rwm_streaming_equals_forward_and_reset_clears_only_the_chosen_world():
    model = _rwm()
    B, T, w = 4, 12, 2
    x = torch.randn(B, T, IN)
    with torch.no_grad():
        full = model(x)  # (B, T, OUT)
    torch.testing.assert_close(_stream(model, x), full, atol=1e-5, rtol=0)
    cache = model.init_cache(B)
    _stream(model, x[:, :5], cache)
    kept = cache.h.clone()
    model.reset_cache(cache, torch.tensor([w]))
    others = torch.arange(B) != w
    assert torch.equal(cache.h[:, others], kept[:, others]) and (cache.h[:, w] == 0).all()
    second = _stream(model, x[:, 5:], cache)
    torch.testing.assert_close(second[others], full[others, 5:], atol=1e-5, rtol=0)
    torch.testing.assert_close(second[w], _stream(model, x[w:w + 1, 5:])[0], atol=1e-5, rtol=0)


def test_rwm_heads_and_gradients():
    model = _rwm().train()
    out, h = model.forward_dist(torch.randn(2, 4, IN))
    assert out["mean"].shape == out["log_std"].shape == (2, 4, OUT) and h.shape == (2, 2, 16)
    assert out["contact"].shape == (2, 4, 3) and out["termination"].shape == (2, 4, 1)
    sum(v.pow(2).mean() for v in out.values()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert len(build_model("rwm", IN, OUT, size="paper").gru.all_weights) == 2  # published: 2 layers
    assert build_model("rwm", IN, OUT, size="paper").config.hidden == 256
