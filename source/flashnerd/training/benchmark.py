"""Model-only throughput: steady-state streaming steps per second of each model at several batch sizes."""

from __future__ import annotations

import time

import torch

from flashnerd.models import build_model


@torch.no_grad()
def model_steps_per_second(kind: str, input_dim: int, output_dim: int, batch: int, size: str = "cpu",
                           device: str = "cpu", min_seconds: float = 1.0, min_steps: int = 3,
                           ensemble: int = 1) -> float:
    """Worlds x steps per second of `model.step` for `batch` worlds after the history is full (warm-up); with
    `ensemble` K > 1, of one step of all K members."""
    dev = torch.device(device)
    model = build_model(kind, input_dim, output_dim, size=size, ensemble=ensemble).to(dev).eval()
    cache = model.init_cache(batch, device=dev)
    x = torch.randn(batch, input_dim, device=dev)  # (B, I) inputs do not change the cost
    for _ in range(model.receptive_field + 1):  # fill the history so the timed steps are the steady state
        model.step(x, cache)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda *a: None)
    sync()
    steps, start = 0, time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < min_seconds:
        model.step(x, cache)
        steps += 1
    sync()
    return batch * steps / (time.perf_counter() - start)
