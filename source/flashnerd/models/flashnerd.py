"""FlashNeRD: a streaming transformer for learned robot dynamics.

One token per frame. Every block attends from the current frame to itself and the last `span` frames only, with a
learned bias per (head, lag) and no absolute positions, so the model is time-shift invariant and streaming needs just a
fixed ring buffer of `span` keys/values per block. Attention and the gated feed-forward run in parallel off one packed
input projection and share one output projection (GPT-J / PaLM style).

With `contact_rows` > 0 (variable-contact mode) the last `contact_rows * (contact_row_dim + 1)` input columns are
packed contact rows (each row's features, then its mask bit; see `contacts/rows.py`): a `ContactEncoder` pools them
into one embedding added to the frame token, and the rest of the frame goes through the usual input projection.

Shapes: B batch (worlds), T frames, C n_embd, H heads, D head_dim, F ff hidden, S span, L layers, R contact rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from flashnerd.models.base import DynamicsModel
from flashnerd.models.contact_encoder import ContactEncoder


@dataclass
class FlashNeRDConfig:
    """Sizes of a FlashNeRD model."""

    input_dim: int
    output_dim: int
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    span: int = 4  # S: past frames each block attends to (its KV cache length), besides the current frame
    ff_mult: float = 2.0  # hidden width of the gated feed-forward = int(ff_mult * n_embd)
    readout_hidden: int = 128
    contact_rows: int = 0  # R > 0: variable-contact mode, packed rows at the end of the input
    contact_row_dim: int = 0  # features per contact row (without the mask bit)
    contact_slots: int = 4  # learned query slots of the contact encoder

    @property
    def packed_contact_dim(self) -> int:
        """Input columns holding packed contact rows (0 in fixed-contact mode)."""
        return self.contact_rows * (self.contact_row_dim + 1) if self.contact_rows else 0


FLASHNERD_SIZES: dict[str, dict] = {
    "cpu": dict(n_layer=4, n_head=4, n_embd=128, span=4, ff_mult=2.0, readout_hidden=128),
    "paper_small": dict(n_layer=6, n_head=12, n_embd=192, span=4, ff_mult=2.0, readout_hidden=128),
    "paper": dict(n_layer=6, n_head=12, n_embd=384, span=4, ff_mult=2.0, readout_hidden=256),
}


@dataclass
class FlashNeRDCache:
    """Per-block ring buffers of keys/values of every world; all worlds step together. S + 1 slots: a step writes
    the newest frame over the oldest first and then attends to every slot at once (the current frame among them)."""

    world_axes: ClassVar[dict[str, int]] = {"k": -3, "v": -3, "count": -1}  # for memory estimates (envs/memory.py)

    k: torch.Tensor  # (L, S+1, B, H, D): slot-major, so writing one frame is one contiguous block per layer
    v: torch.Tensor  # (L, S+1, B, H, D)
    count: torch.Tensor  # (B,) long: valid past frames per world, capped at S
    ptr: int = 0  # the slot the next frame is written to (its previous frame is S + 1 steps old)


class FlashBlock(nn.Module):
    """Pre-LN block with parallel banded attention and gated feed-forward, combined by one output projection."""

    def __init__(self, config: FlashNeRDConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head, self.n_embd = config.n_head, config.n_embd
        self.ff_hidden = int(config.ff_mult * config.n_embd)
        self.ln = nn.LayerNorm(config.n_embd)
        # q, k, v, gate, up in one matmul
        self.in_proj = nn.Linear(config.n_embd, 3 * config.n_embd + 2 * self.ff_hidden)
        self.out_proj = nn.Linear(config.n_embd + self.ff_hidden, config.n_embd)
        # relative position by lag only (0..S); zero init = plain banded attention at the start of training
        self.lag_bias = nn.Parameter(torch.zeros(config.n_head, config.span + 1))  # (H, S+1)
        self.attend = attend_slots  # the streaming step's attention; `FlashNeRD.compile_streaming` fuses it

    def _project(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T, C) -> q, k, v (B, H, T, D) and the feed-forward activation (B, T, F)."""
        B, T, C = h.shape
        C_, F_ = self.n_embd, self.ff_hidden
        q, k, v, gate, up = self.in_proj(self.ln(h)).split([C_, C_, C_, F_, F_], dim=-1)  # (B, T, C) x3, (B, T, F) x2
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        return q, k, v, F.silu(gate) * up  # ..., (B, T, F)

    def _combine(self, h: torch.Tensor, y: torch.Tensor, ff: torch.Tensor) -> torch.Tensor:
        """Residual update from attention output y (B, H, T, D) and ff (B, T, F); returns (B, T, C)."""
        B, T, C = h.shape
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return h + linear_of_concat(self.out_proj, y, ff)  # (B, T, C)

    def forward(self, h: torch.Tensor, lag: torch.Tensor, band: torch.Tensor) -> torch.Tensor:
        """Whole window: h (B, T, C), lag = t - s (T, T) clamped to 0..S, band (T, T) bool -> (B, T, C)."""
        q, k, v, ff = self._project(h)  # (B, H, T, D) x3, (B, T, F)
        mask = self.lag_bias[:, lag].masked_fill(~band, float("-inf"))  # (H, T, T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None])  # (B, H, T, D)
        return self._combine(h, y, ff)

    def step(self, h: torch.Tensor, k_slots: torch.Tensor, v_slots: torch.Tensor, slot: int, lags: torch.Tensor,
             keep: torch.Tensor, slot_index: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Newest frame only: h (B, C) and the ring slots (S+1, B, H, D) -> (B, C) and the slots with this frame's
        key and value in `slot`: written in place, or new tensors when `slot_index` (1,) holds `slot` (the autograd
        form). lags (S+1,) is each slot's lag after the write (0 for `slot`), keep (S+1, B) which slots a world may
        see."""
        B, C = h.shape
        H, D = self.n_head, C // self.n_head
        q, k, v, gate, up = self.in_proj(self.ln(h)).split([C, C, C, self.ff_hidden, self.ff_hidden], dim=-1)
        k, v = k.view(1, B, H, D), v.view(1, B, H, D)
        if slot_index is None:
            k_slots[slot], v_slots[slot] = k[0], v[0]
        else:
            k_slots, v_slots = k_slots.index_copy(0, slot_index, k), v_slots.index_copy(0, slot_index, v)  # x2
        bias = self.lag_bias[:, lags]  # (H, S+1)
        y, ff = self.attend(q.view(B, H, D), gate, up, k_slots, v_slots, bias, keep)  # (B, C), (B, F)
        return h + linear_of_concat(self.out_proj, y, ff), k_slots, v_slots  # (B, C), (S+1, B, H, D) x2


def attend_slots(q: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, k_slots: torch.Tensor, v_slots: torch.Tensor,
                 bias: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The streaming step between its two projections: query q (B, H, D) over the ring slots (S+1, B, H, D) with the
    lag bias of each slot (H, S+1) where `keep` (S+1, B), and the gated feed-forward of gate, up (B, F) ->
    attention output (B, H*D) and feed-forward activation (B, F)."""
    B, H, D = q.shape
    # S+1 keys per query, the slot axis leading: scores, softmax and the weighted sum stay vectorized over worlds
    # and heads (a softmax over a last axis of 5 and per-world (1 x D)(D x S) products are far slower)
    scores = torch.einsum("bhd,sbhd->sbh", q, k_slots) * D**-0.5  # (S+1, B, H)
    scores = (scores + bias.t()[:, None]).masked_fill(~keep[..., None], float("-inf"))  # (S+1, B, H)
    w = torch.softmax(scores, dim=0)  # (S+1, B, H)
    y = torch.einsum("sbh,sbhd->bhd", w, v_slots).reshape(B, H * D)  # (B, H*D)
    return y, F.silu(gate) * up  # (B, H*D), (B, F)


def linear_of_concat(linear: nn.Linear, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """linear(cat([a, b], -1)) without building the concatenation: a (..., A), b (..., A') -> (..., out); two
    matrix products (out of place: vmap over ensemble members has no batching rule for `addmm_`)."""
    A, lead = a.shape[-1], a.shape[:-1]
    W = linear.weight  # (out, A + A')
    out = torch.addmm(linear.bias, a.reshape(-1, A), W[:, :A].t())  # (n, out)
    return torch.addmm(out, b.reshape(-1, b.shape[-1]), W[:, A:].t()).view(*lead, W.shape[0])  # (..., out)


class FlashNeRD(DynamicsModel):
    """Streaming dynamics transformer: per-frame features (normalized) -> per-frame normalized state increment."""

    shared_cache = ("count",)  # an ensemble's members share frame counts; keys and values are per member
    # worlds per pass of `step` on the CPU (0: the whole batch): above ~4096 worlds one pass falls out of cache
    # (measured on a 2-core CPU: 40,000 steps/s at 65,536 worlds in one pass, 90,000 in chunks of 4096;
    # docs/results.md); a GPU takes the whole batch at once
    cpu_chunk = 4096

    def __init__(self, config: FlashNeRDConfig):
        super().__init__()
        assert config.span >= 1, "span must be at least 1 frame"
        self.config = config
        self.receptive_field = config.span * config.n_layer  # each block looks `span` frames further back
        frame_dim = config.input_dim - config.packed_contact_dim  # state, control (and fixed probes) columns
        self.embed = nn.Linear(frame_dim, config.n_embd)
        self.contact = (ContactEncoder(config.contact_row_dim, config.n_embd, config.contact_slots)
                        if config.contact_rows else None)
        self.blocks = nn.ModuleList(FlashBlock(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.readout = nn.Sequential(
            nn.Linear(2 * config.n_embd, config.readout_hidden),
            nn.GELU(),
            nn.Linear(config.readout_hidden, config.output_dim),
        )
        self.skip = nn.Linear(frame_dim, config.output_dim)  # direct affine path keeps current-state info
        self.register_buffer("slots", torch.arange(config.span + 1), persistent=False)  # (S+1,)
        self.apply(self._init_weights)
        for block in self.blocks:  # keep the residual stream's scale independent of depth (GPT-2)
            nn.init.normal_(block.out_proj.weight, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)

    def _embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Frame token (..., C) of inputs x (..., I), and the frame columns (..., I - packed) the skip path reads."""
        n = self.config.packed_contact_dim
        if not n:
            return self.embed(x), x
        frame, packed = x[..., :-n], x[..., -n:]  # (..., I - n), (..., n)
        rows = packed.unflatten(-1, (self.config.contact_rows, -1))  # (..., R, F+1)
        e = self.embed(frame) + self.contact(rows[..., :-1], rows[..., -1] > 0.5)  # (..., C)
        return e, frame

    def _predict(self, h: torch.Tensor, e: torch.Tensor, frame: torch.Tensor) -> torch.Tensor:
        """Readout from last hidden h (..., C), frame token e (..., C), frame columns (...,) -> (..., O)."""
        hidden = F.gelu(linear_of_concat(self.readout[0], self.ln_f(h), e))  # (..., hidden)
        return self.readout[2](hidden) + self.skip(frame)  # (..., O)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training pass over a window: x (B, T, input_dim) -> (B, T, output_dim), banded causal attention."""
        T = x.shape[1]
        t = torch.arange(T, device=x.device)  # (T,)
        lag = t[:, None] - t[None, :]  # (T, T): query frame minus key frame
        band = (lag >= 0) & (lag <= self.config.span)  # (T, T)
        lag = lag.clamp(0, self.config.span)  # (T, T) index into lag_bias; out-of-band entries are masked anyway
        e, frame = self._embed(x)  # (B, T, C), (B, T, I')
        h = e
        for block in self.blocks:
            h = block(h, lag, band)  # (B, T, C)
        return self._predict(h, e, frame)  # (B, T, O)

    def init_cache(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> FlashNeRDCache:
        """Empty ring buffers for `batch_size` worlds (defaults: the model's device and dtype)."""
        p = next(self.parameters())
        device, dtype = device or p.device, dtype or p.dtype
        c = self.config
        shape = (c.n_layer, c.span + 1, batch_size, c.n_head, c.n_embd // c.n_head)  # (L, S+1, B, H, D)
        return FlashNeRDCache(
            k=torch.zeros(shape, device=device, dtype=dtype),
            v=torch.zeros(shape, device=device, dtype=dtype),
            count=torch.zeros(batch_size, device=device, dtype=torch.long),
        )

    def compile_streaming(self) -> None:
        """torch.compile each block's streaming attention and feed-forward gate (the element-wise work between its two
        projections; the products stay eager): about 15% of a step at a planning batch of 256 worlds on a CPU, where
        that work is launch-bound. Equal to the eager step to float rounding; for many steps at one batch size."""
        fused = torch.compile(attend_slots, dynamic=False)  # one graph per shape, shared by the blocks
        for block in self.blocks:
            block.attend = fused

    def _slots(self, cache: FlashNeRDCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Lag (S+1,) of each ring slot once this step's frame is in `cache.ptr` (lag 0) and which slots each world
        may see (S+1, B): those not older than its own history."""
        lags = (cache.ptr - self.slots) % (self.config.span + 1)  # (S+1,)
        return lags, lags[:, None] <= cache.count[None]  # (S+1,), (S+1, B)

    def step(self, x_t: torch.Tensor, cache: FlashNeRDCache) -> torch.Tensor:
        """Process only the newest frame x_t (B, input_dim) -> (B, output_dim), updating `cache` in place.

        Meant for inference; wrap in torch.no_grad() since the cache is written in place (`step_functional` is the
        differentiable form). On the CPU, batches above `cpu_chunk` worlds run in chunks of that many, so a chunk's
        activations stay in cache; every world's result is the same either way (to float rounding).
        """
        lags, keep = self._slots(cache)
        B, n = x_t.shape[0], self.chunk_rows(x_t)
        out = [self._step_rows(x_t[i:i + n], self.cache_rows(cache, i, i + n), lags, keep[:, i:i + n])
               for i in range(0, B, n)]  # (n, O) each
        self._advance(cache)
        return out[0] if len(out) == 1 else torch.cat(out)  # (B, O)

    def chunk_rows(self, x_t: torch.Tensor) -> int:
        """Worlds per pass of a step over x_t (B, I): `cpu_chunk` on the CPU above that many, else all of them."""
        B = x_t.shape[0]
        return self.cpu_chunk if x_t.device.type == "cpu" and 0 < self.cpu_chunk < B else B

    def _advance(self, cache: FlashNeRDCache) -> None:
        """After a step: the next frame goes to the following slot, and every world has one more past frame."""
        cache.ptr = (cache.ptr + 1) % (self.config.span + 1)
        cache.count.add_(1).clamp_(max=self.config.span)  # (B,)

    def _step_rows(self, x: torch.Tensor, rows: FlashNeRDCache, lags: torch.Tensor,
                   keep: torch.Tensor) -> torch.Tensor:
        """`step` for the n worlds of the cache view `rows`: x (n, I), keep (S+1, n) -> (n, O); writes their
        keys/values, not the pointer."""
        e, frame = self._embed(x)  # (n, C), (n, I')
        return self._predict(self._run_blocks(e, rows, lags, keep, range(self.config.n_layer)), e, frame)  # (n, O)

    def _run_blocks(self, h: torch.Tensor, cache: FlashNeRDCache, lags: torch.Tensor, keep: torch.Tensor,
                    layers: range) -> torch.Tensor:
        """The blocks `layers` of a step on the hidden state h (B, C) of the worlds of `cache` (or a view of some)
        -> (B, C), writing their keys/values."""
        for layer in layers:
            h, _, _ = self.blocks[layer].step(h, cache.k[layer], cache.v[layer], cache.ptr, lags, keep)  # (B, C)
        return h

    # --- an ensemble whose members share their first layers runs those once per step (models/ensemble.py) ------

    def shared_prefixes(self, layers: int) -> tuple[str, ...]:
        """Parameter names (prefixes) the members of an ensemble hold once when they share the frame embedding (and
        contact encoder) and the first `layers` blocks."""
        if not 0 <= layers <= self.config.n_layer:
            raise ValueError(f"--ensemble_shared must be 0 to the model's {self.config.n_layer} blocks, got {layers}")
        return ("embed", "contact", *(f"blocks.{i}" for i in range(layers)))

    def cache_rows(self, cache: FlashNeRDCache, lo: int, hi: int) -> FlashNeRDCache:
        """A view of worlds lo..hi of `cache` (writes reach it), for stepping a batch in chunks."""
        return FlashNeRDCache(cache.k[:, :, lo:hi], cache.v[:, :, lo:hi], cache.count[lo:hi], cache.ptr)

    def share_trunk_slots(self, k: torch.Tensor, v: torch.Tensor, ptr: int, layers: int) -> None:
        """After a step whose first `layers` blocks ran once for every member: copy member 0's keys/values of this
        frame (slot `ptr`) into the other members' caches k, v (K, L, S+1, B, H, D), so each member's cache holds its
        whole history, whichever path steps it next."""
        k[1:, :layers, ptr] = k[:1, :layers, ptr]  # (K-1, layers, B, H, D)
        v[1:, :layers, ptr] = v[:1, :layers, ptr]

    def step_trunk(self, x_t: torch.Tensor, cache: FlashNeRDCache, layers: int) -> tuple[torch.Tensor, ...]:
        """`step`'s embedding and first `layers` blocks for all worlds: x_t (B, I) -> hidden (B, C), frame token
        (B, C) and frame columns (B, I'); writes those blocks' keys/values, does not advance the cache."""
        lags, keep = self._slots(cache)
        e, frame = self._embed(x_t)  # (B, C), (B, I')
        return self._run_blocks(e, cache, lags, keep, range(layers)), e, frame

    def step_head(self, h: torch.Tensor, e: torch.Tensor, frame: torch.Tensor, cache: FlashNeRDCache,
                  layers: int) -> torch.Tensor:
        """The rest of `step` from `step_trunk`'s output: the blocks from `layers` on and the readout -> (B, O);
        writes those blocks' keys/values, does not advance the cache."""
        lags, keep = self._slots(cache)
        return self._predict(self._run_blocks(h, cache, lags, keep, range(layers, self.config.n_layer)), e, frame)

    def step_functional(self, x_t: torch.Tensor, cache: FlashNeRDCache) -> tuple[torch.Tensor, FlashNeRDCache]:
        """`step` without writes: x_t (B, input_dim) and `cache` -> (B, output_dim) and a new cache; autograd runs
        through any number of these steps (the inputs' caches are left as they were)."""
        lags, keep = self._slots(cache)
        at = self.slots[cache.ptr:cache.ptr + 1]  # (1,) this frame's slot, on the model's device
        e, frame = self._embed(x_t)  # (B, C), (B, I')
        h, ks, vs = e, [], []
        for layer, block in enumerate(self.blocks):
            h, k, v = block.step(h, cache.k[layer], cache.v[layer], cache.ptr, lags, keep, at)
            ks.append(k)  # (S+1, B, H, D)
            vs.append(v)
        new = FlashNeRDCache(torch.stack(ks), torch.stack(vs), cache.count.clone(), cache.ptr)  # (L, S+1, B, H, D)
        self._advance(new)
        return self._predict(h, e, frame), new  # (B, O)

    def reset_cache(self, cache: FlashNeRDCache, world_ids: torch.Tensor) -> None:
        """Forget the history of `world_ids` only; other worlds are untouched."""
        cache.count[world_ids] = 0
        cache.k[:, :, world_ids] = 0  # (L, S+1, n, H, D); masked by count anyway, zeroed to keep stale data out
        cache.v[:, :, world_ids] = 0
