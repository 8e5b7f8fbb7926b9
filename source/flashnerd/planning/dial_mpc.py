"""DIAL-MPC: diffusion-inspired annealed sampling MPC over any batched `Dynamics` backend.

Controls over the horizon are `num_knots` knots interpolated by a spline to `horizon` control steps. Each
iteration samples `num_samples` knot sequences around the mean with a noise that shrinks over iterations (x0.5 per
iteration) and towards the near end of the horizon (x0.9 per knot), rolls all samples out as one batch, scores them by
their mean reward, and moves the mean to the softmax-weighted average of the samples (weights from the returns
normalized by their spread, temperature 0.05). Between control steps the plan is shifted (warm start). Figures follow
the published method (see shared/reference/NOTES.md).

Gradient refinement (`grad_steps` > 0, given a differentiable `refine` rollout): after the sampling iterations the
plan's knots take that many Adam steps up the gradient of its return through the rollout (a learned model's), and
the best plan that rollout scored, the sampled one included, becomes the plan: refinement never returns a plan
that scores lower on the model than sampling alone.

Shapes: S samples, H horizon steps, K knots, A action dimensions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class DialMPCConfig:
    """Settings of DIAL-MPC (published defaults where they exist)."""

    num_samples: int = 2048
    horizon: int = 25  # control steps per plan (Hsample)
    num_knots: int = 6  # Hnode + 1
    iterations: int = 2  # per control step
    first_iterations: int = 10  # at the first control step
    sigma: float = 0.3  # knot noise at the far end of the horizon, first iteration
    iteration_decay: float = 0.5  # noise factor per iteration
    horizon_decay: float = 0.9  # noise factor per knot towards the near end
    temperature: float = 0.05
    grad_steps: int = 0  # gradient steps on the plan's knots after sampling (0: sampling alone)
    grad_lr: float = 0.05  # Adam step on the knots (action units)
    action_low: float = -1.0
    action_high: float = 1.0


def spline_matrix(num_knots: int, horizon: int) -> torch.Tensor:
    """(H, K) matrix taking knot values (K,) at evenly spaced times over [0, H-1] to a natural cubic spline sampled at
    every control step. (The published method uses a quadratic spline; an interpolating quadratic spline oscillates
    with growing amplitude along the horizon — a +-1 knot pattern reached 3.0 — so this uses the cubic one.)"""
    K, H = num_knots, horizon
    if K < 2:
        raise ValueError(f"a spline needs at least 2 knots, got {K}")
    y = torch.eye(K, dtype=torch.float64)  # one unit knot vector per column
    h = (H - 1.0) / (K - 1)
    m = torch.zeros(K, K, dtype=torch.float64)  # second derivatives at the knots; natural ends: m_0 = m_{K-1} = 0
    if K > 2:
        off = torch.full((K - 3,), h, dtype=torch.float64)
        A = torch.diag(torch.full((K - 2,), 4.0 * h, dtype=torch.float64)) + torch.diag(off, 1) + torch.diag(off, -1)
        rhs = 6.0 / h * (y[2:] - 2.0 * y[1:-1] + y[:-2])  # (K-2, K)
        m[1:-1] = torch.linalg.solve(A, rhs)
    x = torch.arange(H, dtype=torch.float64)  # (H,)
    i = torch.clamp((x / h).floor().long(), 0, K - 2)  # (H,) piece of each step
    left, right = (i * h)[:, None], ((i + 1) * h)[:, None]  # (H, 1)
    xs = x[:, None]
    s = (m[i] * (right - xs) ** 3 + m[i + 1] * (xs - left) ** 3) / (6.0 * h)
    s = s + (y[i] / h - m[i] * h / 6.0) * (right - xs) + (y[i + 1] / h - m[i + 1] * h / 6.0) * (xs - left)
    return s.float()  # (H, K)


class DialMPC:
    """Annealed sampling MPC. `evaluate(actions (S, H, A)) -> returns (S,)` rolls every sample out from the current
    state as one batch (see `rollout_returns`); `refine(actions (1, H, A)) -> return (1,)`, differentiable with
    respect to the actions, scores one plan for gradient refinement (needed when `cfg.grad_steps` > 0)."""

    def __init__(self, cfg: DialMPCConfig, action_dim: int, evaluate: Callable[[torch.Tensor], torch.Tensor],
                 device: str | torch.device = "cpu", seed: int = 0,
                 refine: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        if cfg.grad_steps < 0:
            raise ValueError(f"grad_steps must be >= 0, got {cfg.grad_steps}")
        if cfg.grad_steps and refine is None:
            raise ValueError(f"grad_steps {cfg.grad_steps} needs a differentiable refine rollout; pass refine=")
        self.cfg, self.evaluate, self.refine, self.device = cfg, evaluate, refine, torch.device(device)
        self.spline = spline_matrix(cfg.num_knots, cfg.horizon).to(self.device)  # (H, K)
        self.mean = torch.zeros(cfg.num_knots, action_dim, device=self.device)  # (K, A)
        # noise per knot: smallest at the near end of the horizon
        powers = torch.arange(cfg.num_knots - 1, -1, -1, device=self.device, dtype=torch.float32)  # (K,)
        self.knot_sigma = cfg.sigma * cfg.horizon_decay ** powers  # (K,)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.steps = 0
        self.last_returns = torch.zeros(0)
        self.refinements: list[dict] = []  # per decision with grad_steps: the sampled and the refined plan's return

    def actions(self, knots: torch.Tensor) -> torch.Tensor:
        """Knots (..., K, A) -> clipped per-step actions (..., H, A)."""
        return (self.spline @ knots).clamp(self.cfg.action_low, self.cfg.action_high)

    def optimize(self, iterations: int | None = None) -> torch.Tensor:
        """Run the annealed iterations from the current mean; returns the planned actions (H, A)."""
        c = self.cfg
        n_iter = iterations or (c.first_iterations if self.steps == 0 else c.iterations)
        for i in range(n_iter):
            sigma = self.knot_sigma * c.iteration_decay ** i  # (K,)
            noise = torch.randn((c.num_samples, *self.mean.shape), device=self.device, generator=self.gen)
            knots = self.mean + sigma[None, :, None] * noise  # (S, K, A)
            knots[0] = self.mean  # the current plan competes too
            returns = self.evaluate(self.actions(knots))  # (S,)
            z = (returns - returns.mean()) / (returns.std() + 1e-8) / c.temperature  # (S,)
            weights = torch.softmax(z, dim=0)  # (S,)
            self.mean = (weights[:, None, None] * knots).sum(0)  # (K, A)
            self.last_returns = returns
        if c.grad_steps:
            self.mean = self._refine(self.mean)
        return self.actions(self.mean)

    def _refine(self, knots: torch.Tensor) -> torch.Tensor:
        """Adam ascent of `refine`'s return on the knots (K, A); the best knots it scored (the start included). Only
        the knots take gradients (a learned model's weights do not), and a non-finite gradient ends the ascent."""
        c = self.cfg
        x = knots.detach().clone().requires_grad_(True)  # (K, A)
        opt = torch.optim.Adam([x], lr=c.grad_lr)
        scores, best = [], 0
        with torch.enable_grad():
            for i in range(c.grad_steps + 1):
                ret = self.refine(self.actions(x)[None])[0]  # () with the graph back to x
                scores.append(float(ret.detach()))  # one host sync per step, on a one-world rollout
                if scores[-1] > scores[best]:  # NaN never wins; ties keep the earlier plan
                    best, best_knots = i, x.detach().clone()
                if i == c.grad_steps:
                    break
                (grad,) = torch.autograd.grad(-ret, x)  # (K, A)
                if not torch.isfinite(grad).all():
                    break
                x.grad = grad
                opt.step()
                with torch.no_grad():  # knots outside the action range get no gradient through the clamp
                    x.clamp_(c.action_low, c.action_high)
        self.refinements.append({"sampled": scores[0], "refined": scores[best], "kept_step": best})
        return best_knots if best else knots

    def step(self) -> torch.Tensor:
        """Plan, return the first action (A,), and shift the plan by one control step for the next call."""
        plan = self.optimize()  # (H, A)
        self.steps += 1
        # warm start: the knots move one step along the horizon; the last one holds its value
        t = torch.linspace(0.0, self.cfg.horizon - 1.0, self.cfg.num_knots, device=self.device)
        shifted = torch.clamp(t + 1.0, max=self.cfg.horizon - 1.0).round().long()  # (K,)
        self.mean = plan[shifted].clone()  # (K, A) knot values read off the current plan
        return plan[0]


def rollout_returns(dyn, qpos: torch.Tensor, qvel: torch.Tensor, actions: torch.Tensor,
                    reward: Callable[[object, int], torch.Tensor], to_ctrl: Callable[[torch.Tensor], torch.Tensor],
                    on_step: Callable[[object], None] | None = None, grad: bool = False) -> torch.Tensor:
    """Mean reward (S,) of S action sequences (S, H, A) from one state (nq,), (nv,), rolled out as one batch on `dyn`
    (a backend with S worlds). `to_ctrl` maps actions (S, A) to the backend's controls; `reward(state, h) -> (S,)`
    scores the state after step h (1..H); `on_step(state)` sees every state (e.g. to record rollouts). With `grad`
    (a differentiable backend) the returns keep the graph back to `actions`."""
    S, H, _ = actions.shape
    if dyn.num_worlds != S:
        raise ValueError(f"backend has {dyn.num_worlds} worlds for {S} samples; build it with num_worlds={S}")
    with torch.set_grad_enabled(grad):
        dyn.reset(torch.arange(S), qpos.expand(S, -1), qvel.expand(S, -1))
        total = torch.zeros(S, device=actions.device)
        for h in range(H):
            dyn.step(to_ctrl(actions[:, h]))
            state = dyn.state()
            total = total + reward(state, h + 1).to(total)
            if on_step is not None:
                on_step(state)
        return total / H
