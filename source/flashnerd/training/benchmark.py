"""Model-only throughput: steady-state streaming steps per second of each model at several batch sizes, and how far
that is from the machine's limit (a roofline: the model's achieved FLOP rate over the fp32 matmul rate this machine
reaches at the model's own matmul shapes, measured in the same run)."""

from __future__ import annotations

import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from flashnerd.models import build_model


def _steady_model(kind: str, input_dim: int, output_dim: int, batch: int, size: str, dev: torch.device,
                  ensemble: int = 1, ensemble_shared: int = 0):
    """A model, its cache with a full history and an input (B, I): the state every timed step starts from."""
    model = build_model(kind, input_dim, output_dim, size=size, ensemble=ensemble,
                        ensemble_shared=ensemble_shared).to(dev).eval()
    cache = model.init_cache(batch, device=dev)
    x = torch.randn(batch, input_dim, device=dev)  # (B, I) inputs do not change the cost
    for _ in range(model.receptive_field + 1):  # fill the history so the timed steps are the steady state
        model.step(x, cache)
    return model, cache, x


class _MatmulRecorder(TorchDispatchMode):
    """Records the (batch, m, k, n) of every matrix product run under it (mm, addmm, bmm, baddbmm)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, int, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in (torch.ops.aten.mm, torch.ops.aten.bmm, torch.ops.aten.addmm, torch.ops.aten.baddbmm):
            a, b = args[-2], args[-1]  # the two factors come last (addmm/baddbmm lead with the added term)
            batch = a.shape[0] if a.dim() == 3 else 1
            self.shapes.append((batch, a.shape[-2], a.shape[-1], b.shape[-1]))
        return func(*args, **(kwargs or {}))


def _timed(fn, dev: torch.device, min_seconds: float, min_steps: int = 3) -> float:
    """Calls of `fn` per second over at least `min_seconds` and `min_steps` calls."""
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda *a: None)
    fn()
    sync()
    steps, start = 0, time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < min_seconds:
        fn()
        steps += 1
    sync()
    return steps / (time.perf_counter() - start)


@torch.no_grad()
def model_roofline(kind: str, input_dim: int, output_dim: int, batch: int, steps_per_s: float, size: str = "cpu",
                   device: str = "cpu", min_seconds: float = 1.0) -> dict[str, float]:
    """How close one streaming step of `batch` worlds running at `steps_per_s` (worlds x steps / s) comes to this
    machine's fp32 matmul rate: the step's FLOPs (PyTorch's FLOP counter: matrix products, attention's included), the
    achieved rate,
    and the rate of the same sequence of matrix products (every mm/addmm/bmm of one step, at its own shapes, on
    preallocated operands) timed alone; `fraction` is the first rate over the second."""
    dev = torch.device(device)
    model, cache, x = _steady_model(kind, input_dim, output_dim, batch, size, dev)
    # attention through the math kernel for this pass: its products are then counted and replayed like any other
    # (the CPU's fused kernel is not counted); the arithmetic is the same
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, _MatmulRecorder() as recorder:
        model.step(x, cache)
    flops = counter.get_total_flops() / batch  # per world-step
    # the same matmuls on preallocated operands: (b, m, k) @ (b, k, n) with b = 1 for plain matrix products
    operands = [(torch.randn(b, m, k, device=dev), torch.randn(b, k, n, device=dev), torch.empty(b, m, n, device=dev))
                for b, m, k, n in recorder.shapes]

    def matmuls() -> None:
        for a, w, out in operands:
            torch.bmm(a, w, out=out)

    matmul_rate = _timed(matmuls, dev, min_seconds) * sum(2 * b * m * k * n for b, m, k, n in recorder.shapes)
    achieved = flops * steps_per_s
    # four significant digits, not decimals: at small batches on a loaded machine the rates fall below 0.01 GFLOP/s
    return {"flops_per_step": round(flops), "achieved_gflops": float(f"{achieved / 1e9:.4g}"),
            "matmul_gflops": float(f"{matmul_rate / 1e9:.4g}"), "fraction": float(f"{achieved / matmul_rate:.4g}")}


@torch.no_grad()
def model_steps_per_second(kind: str, input_dim: int, output_dim: int, batch: int, size: str = "cpu",
                           device: str = "cpu", min_seconds: float = 1.0, min_steps: int = 3,
                           ensemble: int = 1, ensemble_shared: int = 0) -> float:
    """Worlds x steps per second of `model.step` for `batch` worlds after the history is full (warm-up); with
    `ensemble` K > 1, of one step of all K members (sharing their first `ensemble_shared` blocks)."""
    dev = torch.device(device)
    model, cache, x = _steady_model(kind, input_dim, output_dim, batch, size, dev, ensemble, ensemble_shared)
    return batch * _timed(lambda: model.step(x, cache), dev, min_seconds, min_steps)
