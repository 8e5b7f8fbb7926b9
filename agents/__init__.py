"""RSL-RL agent configurations for the FlashNeRD tasks (dataclasses with Isaac Lab's field names)."""

from flashnerd_agents.rsl_rl_cfg import (
    RslRlOnPolicyRunnerCfg,
    RslRlPpoActorCriticCfg,
    RslRlPpoAlgorithmCfg,
)

__all__ = ["RslRlOnPolicyRunnerCfg", "RslRlPpoActorCriticCfg", "RslRlPpoAlgorithmCfg"]
