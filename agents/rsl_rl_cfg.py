"""PPO runner configs with Isaac Lab's field names, converted to the dict that rsl-rl-lib 5's `OnPolicyRunner` takes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class RslRlPpoActorCriticCfg:
    """Actor and critic MLPs with a Gaussian action distribution."""

    init_noise_std: float = 1.0
    actor_hidden_dims: list[int] = field(default_factory=lambda: [128, 128, 128])
    critic_hidden_dims: list[int] = field(default_factory=lambda: [128, 128, 128])
    activation: str = "elu"
    actor_obs_normalization: bool = False
    critic_obs_normalization: bool = False


@dataclass
class RslRlPpoAlgorithmCfg:
    """PPO hyperparameters."""

    value_loss_coef: float = 1.0
    use_clipped_value_loss: bool = True
    clip_param: float = 0.2
    entropy_coef: float = 0.005
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    learning_rate: float = 1.0e-3
    schedule: str = "adaptive"
    gamma: float = 0.99
    lam: float = 0.95
    desired_kl: float = 0.01
    max_grad_norm: float = 1.0


@dataclass
class RslRlOnPolicyRunnerCfg:
    """Everything `flashnerd train` needs besides the env: PPO settings and logging (resuming is the CLI's
    `--resume --load_run --checkpoint`)."""

    experiment_name: str
    seed: int = 42
    device: str = "cpu"
    num_steps_per_env: int = 24
    max_iterations: int = 300
    save_interval: int = 50
    run_name: str = ""
    logger: str = "tensorboard"
    clip_actions: float | None = None
    obs_groups: dict[str, list[str]] = field(default_factory=lambda: {"actor": ["policy"], "critic": ["critic"]})
    policy: RslRlPpoActorCriticCfg = field(default_factory=RslRlPpoActorCriticCfg)
    algorithm: RslRlPpoAlgorithmCfg = field(default_factory=RslRlPpoAlgorithmCfg)

    def to_rsl_rl_dict(self) -> dict:
        """The train_cfg dict of rsl-rl-lib 5.x (`class_name` keys select its classes)."""
        p = self.policy
        return {
            "seed": self.seed,
            "num_steps_per_env": self.num_steps_per_env,
            "save_interval": self.save_interval,
            "experiment_name": self.experiment_name,
            "run_name": self.run_name,
            "logger": self.logger,
            "obs_groups": {k: list(v) for k, v in self.obs_groups.items()},
            "algorithm": {"class_name": "PPO", **dataclasses.asdict(self.algorithm)},
            "actor": {
                "class_name": "MLPModel",
                "hidden_dims": list(p.actor_hidden_dims),
                "activation": p.activation,
                "obs_normalization": p.actor_obs_normalization,
                "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": p.init_noise_std},
            },
            "critic": {
                "class_name": "MLPModel",
                "hidden_dims": list(p.critic_hidden_dims),
                "activation": p.activation,
                "obs_normalization": p.critic_obs_normalization,
            },
        }
