"""Ensembles in the model: K members of one model kind with a leading member dimension in every weight, in one
module and one checkpoint. Training runs as one batched call (`torch.func.vmap` over the stacked weights); streaming
too on a GPU, while on the CPU the members step in turn on their weight slices (faster there, see `_cache_call`).

Members differ in initialization (built one after another from the global RNG) and in data order (the fitter draws
every member its own windows). FlashNeRD members may share their first layers (`shared_layers`: the frame embedding
and that many blocks, held once; trained on every member's windows): a step then runs those once and only the rest per
member, at a fraction of K full members' cost, and the members differ in their later blocks and readouts only.

The training hooks take the members' batches stacked along the batch dimension: rows [k*b, (k+1)*b) belong to
member k. Streaming feeds one shared frame per world to every member and returns all the
members' predictions (K, B, O); cache state that depends on the weights (keys and values, hidden states) carries a
member dimension, history that depends on the inputs alone (frame counts, NeRD's input window) is shared.

Shapes: K members, B batch, T frames, I input_dim, O output_dim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashnerd.models.base import DynamicsModel

MAX_MEMBERS = 64  # more members than this is a corrupt file or a typo, not an ensemble


@dataclass
class EnsembleCache:
    """The members' streaming cache: the member cache type, its weight-dependent tensors with a member dim (K, ...)."""

    inner: Any  # the member's cache dataclass (FlashNeRDCache, NeRDCache, RWMCache)
    batched: tuple[str, ...]  # fields of `inner` holding one tensor per member


class _Method(nn.Module):
    """Runs one method of a module, so that `functional_call` (which calls `forward`) can run `step` or `loss`."""

    def __init__(self, module: nn.Module, method: str) -> None:
        super().__init__()
        self.m, self.method = module, method

    def forward(self, *args, **kwargs):
        return getattr(self.m, self.method)(*args, **kwargs)


class Ensemble(DynamicsModel):
    """K members of one `DynamicsModel` class; `members` is one member whose parameters are stacked to (K, ...),
    except those of the first `shared_layers` layers, held once (member 0's)."""

    def __init__(self, members: list[DynamicsModel], shared_layers: int = 0) -> None:
        super().__init__()
        if not 2 <= len(members) <= MAX_MEMBERS:
            raise ValueError(f"an ensemble has 2 to {MAX_MEMBERS} members, got {len(members)}")
        template = members[0]
        if shared_layers and not hasattr(template, "shared_prefixes"):
            raise ValueError(f"--ensemble_shared: members of a {type(template).__name__} ensemble share no layers; "
                             "FlashNeRD members do")
        self.num_members, self.shared_layers = len(members), shared_layers
        prefixes = template.shared_prefixes(shared_layers) if shared_layers else ()
        params, _ = stack_module_state(members)  # {name: (K, ...)}; members keep no persistent buffers
        # parameter names as `functional_call` on a `_Method` wrapper reads them, of those held once
        self._shared = frozenset(f"m.{n}" for n in params if any(n == p or n.startswith(f"{p}.") for p in prefixes))
        for name, value in params.items():  # the template's weights become the stacked ones (shared: member 0's)
            path, _, leaf = name.rpartition(".")
            value = value[0] if f"m.{name}" in self._shared else value
            setattr(template.get_submodule(path), leaf, nn.Parameter(value.detach().clone()))
        template.batched_members = True  # it now runs under vmap: ops with batching rules only (see RWM)
        self.members = template
        self.config = template.config
        self.context, self.receptive_field = template.context, template.receptive_field
        self.shared_cache = template.shared_cache
        self._methods = {m: (_Method(template, m),) for m in ("forward", "loss", "forecast", "step", "step_functional",
                                                           "reset_cache", "step_trunk", "step_head")}
        self.batched_call: bool | None = None  # streaming as one vmap'd call (None: on GPUs; True/False: always/never)

    def _stacked_params(self) -> dict[str, torch.Tensor]:
        """The stacked (K, ...) weights (shared ones once), named as `functional_call` on a `_Method` wrapper reads
        them."""
        return {f"m.{n}": p for n, p in self.members.named_parameters()}

    def _param_dims(self) -> dict[str, int | None]:
        """vmap's member axis of each weight: 0, or None for a shared one (every member reads the same)."""
        return {n: None if n in self._shared else 0 for n in self._stacked_params()}

    def _member_params(self, stacked: dict[str, torch.Tensor], k: int) -> dict[str, torch.Tensor]:
        """Member k's weights: its slices of the stacked ones, and the shared ones."""
        return {n: p if n in self._shared else p[k] for n, p in stacked.items()}

    def _vmapped(self, method: str, in_dims: tuple, randomness: str = "error") -> Callable:
        """`method` of the members as one call over the stacked weights; extra args follow `in_dims`."""
        (call,) = self._methods[method]
        params = self._stacked_params()

        def one(p, *args):
            return functional_call(call, p, args)

        batched = vmap(one, in_dims=(self._param_dims(), *in_dims), randomness=randomness)
        return lambda *args: batched(params, *args)

    # --- training hooks: rows of member k are [k*b, (k+1)*b) ---------------------------------------------------

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """(K*b, ...) -> (K, b, ...)."""
        if x.shape[0] % self.num_members:
            raise ValueError(f"an ensemble of {self.num_members} takes a multiple of {self.num_members} rows, got "
                             f"{x.shape[0]}")
        return x.unflatten(0, (self.num_members, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Every member on its own windows: x (K*b, T, I) -> (K*b, T, O)."""
        with sdpa_kernel(SDPBackend.MATH):  # the fused CPU kernels have no vmap rule; the math path does
            return self._vmapped("forward", (0,))(self._split(x)).flatten(0, 1)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Sum of the members' own losses on their rows of x (K*b, T, I), y (K*b, T, O): each member's gradient is
        what it would be alone."""
        with sdpa_kernel(SDPBackend.MATH):
            return self._vmapped("loss", (0, 0))(self._split(x), self._split(y)).sum()

    def forecast(self, window: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Each member's forecast from its rows of window (K*b, T, I) -> (K*b, O); random draws differ per member."""
        with sdpa_kernel(SDPBackend.MATH):
            out = self._vmapped("forecast", (0, None), randomness="different")(self._split(window), generator)
        return out.flatten(0, 1)

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip each member's gradient norm to `max_norm` on its own (as K separate fits would), and the shared
        layers' gradient (the sum of what every member asks of them) on its own; returns the K members' norms."""
        named = [(n, p.grad) for n, p in self._stacked_params().items() if p.grad is not None]
        grads = [g for n, g in named if n not in self._shared]
        sq = torch.stack([g.flatten(1).square().sum(1) for g in grads]).sum(0)  # (K,)
        norms = sq.sqrt()  # (K,)
        scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # (K,)
        for g in grads:
            g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
        shared = [g for n, g in named if n in self._shared]
        if shared:
            norm = torch.stack([g.square().sum() for g in shared]).sum().sqrt()  # ()
            for g in shared:
                g.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norms

    # --- streaming: one shared frame per world, every member's prediction --------------------------------------

    def init_cache(self, batch_size: int, device: torch.device | str | None = None,
                   dtype: torch.dtype | None = None) -> EnsembleCache:
        """A member cache for `batch_size` worlds, its weight-dependent tensors repeated per member (K, ...)."""
        inner = self.members.init_cache(batch_size, device=device, dtype=dtype)
        batched = tuple(f.name for f in dataclasses.fields(inner)
                        if isinstance(getattr(inner, f.name), torch.Tensor) and f.name not in self.shared_cache)
        K = self.num_members
        for name in batched:
            t = getattr(inner, name)
            setattr(inner, name, t.unsqueeze(0).expand(K, *t.shape).clone())  # (K, ...)
        return EnsembleCache(inner, batched)

    def _cache_call(self, method: str, cache: EnsembleCache, arg: torch.Tensor):
        """Run `method(arg, member cache)` for every member; writes land in `cache`'s tensors, and the shared fields
        (frame counts, a ring pointer) advance once.

        On a GPU the members run as one vmap'd call (one launch per op for all members). On the CPU they run in turn
        on their weight slices: measured at 4096 worlds, vmap's batched matmuls cost 1.7x the members' own
        cache-resident ones and its broadcasts add copies (a K=4 FlashNeRD step: 7.6x one model's vmap'd, 4.0x in
        turn)."""
        inner = cache.inner
        if method == "step" and self.shared_layers and self.batched_call is not True:  # on any device by default
            return self._shared_trunk_step(cache, arg)
        if self.batched_call if self.batched_call is not None else arg.device.type != "cpu":
            return self._vmapped_cache_call(method, cache, arg)
        (call,) = self._methods[method]
        stacked = self._stacked_params()
        shared = [f.name for f in dataclasses.fields(inner) if f.name not in cache.batched]
        # member 0 advances the shared state in place (it is kept); the others advance copies of the state before it
        before = {n: v.clone() for n in shared if isinstance(v := getattr(inner, n), torch.Tensor)}
        outs, first = [], None
        for k in range(self.num_members):
            own = {n: getattr(inner, n)[k] for n in cache.batched}  # views: in-place writes reach the cache
            copies = {n: t.clone() for n, t in before.items()} if k else {}
            c = dataclasses.replace(inner, **own, **copies)
            outs.append(functional_call(call, self._member_params(stacked, k), _cache_args(method, arg, c)))
            if first is None:
                first = c
        for name in shared:  # plain fields (a ring pointer) are rebound, once
            setattr(inner, name, getattr(first, name))
        return torch.stack(outs) if method == "step" else None

    def _shared_trunk_step(self, cache: EnsembleCache, x_t: torch.Tensor) -> torch.Tensor:
        """`step` of members that share their first layers: those once (into member 0's cache slots, then copied to
        the others'), then each member's own layers from their output -> (K, B, O). On the CPU in chunks of the
        model's `cpu_chunk` worlds, as its own step."""
        inner, stacked, m, L = cache.inner, self._stacked_params(), self.members, self.shared_layers
        (trunk,), (head,) = self._methods["step_trunk"], self._methods["step_head"]
        own = [dataclasses.replace(inner, **{n: getattr(inner, n)[k] for n in cache.batched})
               for k in range(self.num_members)]  # views: in-place writes reach the cache
        B, n = x_t.shape[0], m.chunk_rows(x_t)
        chunks = []
        for lo in range(0, B, n):
            rows = [m.cache_rows(c, lo, lo + n) for c in own]  # worlds lo..lo+n of each member's cache
            h, e, frame = functional_call(trunk, self._member_params(stacked, 0), (x_t[lo:lo + n], rows[0], L))
            chunks.append(torch.stack([functional_call(head, self._member_params(stacked, k), (h, e, frame, c, L))
                                       for k, c in enumerate(rows)]))  # (K, n, O)
        m.share_trunk_slots(inner.k, inner.v, inner.ptr, L)
        m._advance(inner)  # the ring pointer and frame counts move once
        return chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=1)  # (K, B, O)

    def _vmapped_cache_call(self, method: str, cache: EnsembleCache, arg: torch.Tensor):
        """`_cache_call` as one vmap over the members' stacked weights."""
        inner, seen = cache.inner, []

        def with_cache(p, a, fields):
            c = dataclasses.replace(inner, **fields)
            seen.append(c)
            out = functional_call(self._methods[method][0], p, _cache_args(method, a, c))
            return torch.zeros(()) if out is None else out  # vmap returns tensors only (reset_cache: none)

        params = self._stacked_params()
        fields = {n: getattr(inner, n) for n in cache.batched}
        with sdpa_kernel(SDPBackend.MATH):
            out = vmap(with_cache, in_dims=(self._param_dims(), None, 0))(params, arg, fields)
        for f in dataclasses.fields(inner):
            if f.name not in cache.batched:  # shared tensors were written in place; plain fields are rebound
                setattr(inner, f.name, getattr(seen[0], f.name))
        return out

    def step(self, x_t: torch.Tensor, cache: EnsembleCache) -> torch.Tensor:
        """The newest frame x_t (B, I), the same for every member -> every member's prediction (K, B, O)."""
        return self._cache_call("step", cache, x_t)

    def step_functional(self, x_t: torch.Tensor, cache: EnsembleCache) -> tuple[torch.Tensor, EnsembleCache]:
        """`step` without writes: every member's prediction (K, B, O) and a new cache (autograd runs through it).
        The members run in turn on their weight slices; the shared fields advance as member 0's do."""
        inner, stacked = cache.inner, self._stacked_params()
        (call,) = self._methods["step_functional"]
        outs, news = [], []
        for k in range(self.num_members):
            own = dataclasses.replace(inner, **{n: getattr(inner, n)[k] for n in cache.batched})
            out, new = functional_call(call, self._member_params(stacked, k), (x_t, own))
            outs.append(out)
            news.append(new)
        stacked_fields = {n: torch.stack([getattr(c, n) for c in news]) for n in cache.batched}  # (K, ...)
        return torch.stack(outs), EnsembleCache(dataclasses.replace(news[0], **stacked_fields), cache.batched)

    def reset_cache(self, cache: EnsembleCache, world_ids: torch.Tensor) -> None:
        """Forget the history of `world_ids` in every member."""
        self._cache_call("reset_cache", cache, world_ids)


def _cache_args(method: str, arg: torch.Tensor, cache: Any) -> tuple:
    """The arguments of a member's `step(x_t, cache)` or `reset_cache(cache, world_ids)`."""
    return (arg, cache) if method == "step" else (cache, arg)


def disagreement(pred: torch.Tensor) -> torch.Tensor:
    """Spread of the members' normalized predictions (K, B, O) -> (B,): the RMS over outputs of the std over
    members, in units of the target's std (0 when the members agree)."""
    var = pred.var(dim=0, unbiased=False).mean(dim=-1)  # (B,)
    # exactly 0 for identical members, without the root's infinite derivative there (a NaN in a backward pass)
    return torch.where(var > 0, var.clamp_min(1e-30).sqrt(), 0.0)  # (B,)
