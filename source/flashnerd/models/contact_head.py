"""Contact head: which contact bodies touch something at the end of a model step, and how hard.

The dynamics models predict the state; the tasks' contact terms and terminations read a per-body contact force. The
head maps the frame a learned backend builds from the state it just predicted (the normalized model input: state,
joint-target error under the control just applied, contact features) to a contact logit and a log force per contact
body. It is trained on the recorded contact sensors (`contact_force` of `flashnerd record`, or a robot log's
`contact_<body>` flags) with each body's positives weighted by its negative/positive ratio (capped), so contacts
that are rare in the data (a thigh on the ground, a fall onto the base) are not predicted away. One head serves
every model kind and every ensemble member: it reads the state, not the model.

Shapes: B batch, I frame input dim, K contact bodies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

CONTACT_LABEL_N = 1.0  # N: a body touches when its recorded force exceeds this (the tasks' contact thresholds)
MAX_POS_WEIGHT = 100.0  # cap of a body's positive-class weight (a body seen touching once must not dominate)
MAX_FORCE_N = 1e5  # largest force a head reports (a state far outside the data must not give inf)
MAX_HIDDEN, MAX_LAYERS = 4096, 16  # sizes a checkpoint's head may ask for


@dataclass
class ContactHeadConfig:
    """Sizes of a contact head."""

    input_dim: int
    num_bodies: int
    hidden: int = 128
    layers: int = 2


class ContactHead(nn.Module):
    """MLP: normalized frame (B, I) -> contact logits (B, K) and log(1 + force / 1 N) (B, K)."""

    def __init__(self, config: ContactHeadConfig) -> None:
        super().__init__()
        self.config = config
        dims = [config.input_dim] + [config.hidden] * config.layers
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ELU()]
        self.trunk = nn.Sequential(*layers)
        self.out = nn.Linear(dims[-1], 2 * config.num_bodies)
        # per-body positive weight of the classification loss; set from the training data by `fit_contact_head`
        self.register_buffer("pos_weight", torch.ones(config.num_bodies))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., I) -> contact logits (..., K), predicted log(1 + force) (..., K)."""
        logits, log_force = self.out(self.trunk(x)).chunk(2, dim=-1)  # (..., K) x2
        return logits, log_force

    @torch.no_grad()
    def contact_force(self, x: torch.Tensor) -> torch.Tensor:
        """Contact force (..., K) in N: the predicted force where the body is predicted to touch, else 0. A touching
        body reports at least the label threshold, so a task's threshold of that size sees every predicted contact."""
        logits, log_force = self(x)  # (..., K) x2
        log_force = log_force.clamp(max=math.log1p(MAX_FORCE_N))  # (..., K)
        force = torch.expm1(log_force).clamp_min(CONTACT_LABEL_N * 1.001)  # (..., K)
        return torch.where(logits > 0, force, torch.zeros_like(force))

    def loss(self, x: torch.Tensor, touching: torch.Tensor, force: torch.Tensor | None) -> torch.Tensor:
        """Class-weighted BCE of the contact logits against `touching` (B, K) in {0, 1}, plus the MSE of the
        predicted log(1 + force) where a recorded force (B, K) exists and the body touches."""
        logits, log_force = self(x)  # (B, K) x2
        loss = F.binary_cross_entropy_with_logits(logits, touching, pos_weight=self.pos_weight)
        if force is None:
            return loss
        mask = touching > 0  # (B, K) the force is learned where there is one
        err = torch.where(mask, (log_force - torch.log1p(force.clamp_min(0.0))).square(), 0.0)  # (B, K)
        return loss + err.sum() / mask.sum().clamp_min(1)


def balanced_pos_weight(touching: torch.Tensor) -> torch.Tensor:
    """Per-body positive weight (K,) = negatives / positives of `touching` (N, K), in [1, MAX_POS_WEIGHT]; a body
    never seen touching gets 1 (there is nothing to weight)."""
    pos = touching.sum(0)  # (K,)
    neg = touching.shape[0] - pos  # (K,)
    return torch.where(pos > 0, neg / pos.clamp_min(1.0), torch.ones_like(pos)).clamp(1.0, MAX_POS_WEIGHT)


def classification_metrics(predicted: torch.Tensor, touching: torch.Tensor) -> dict[str, float | None]:
    """Rates of predicted (N,) against true (N,) contacts: positive share, balanced accuracy (0.5 for any constant
    predictor), precision, recall, F1 (None where undefined)."""
    p, t = predicted.bool(), touching.bool()
    tp, fp = int((p & t).sum()), int((p & ~t).sum())
    fn, tn = int((~p & t).sum()), int((~p & ~t).sum())
    recall = tp / (tp + fn) if tp + fn else None
    specificity = tn / (tn + fp) if tn + fp else None
    precision = tp / (tp + fp) if tp + fp else None
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None
    balanced = 0.5 * (recall + specificity) if recall is not None and specificity is not None else None
    return {"positive_share": round((tp + fn) / max(1, len(t)), 5), "balanced_accuracy": _r(balanced),
            "precision": _r(precision), "recall": _r(recall), "f1": _r(f1)}


def _r(x: float | None) -> float | None:
    """x rounded to 4 digits (None stays None)."""
    return None if x is None else round(x, 4)
