"""Base-velocity tracking tasks. Registers FlashNeRD-Velocity-* ids."""

import gymnasium as gym

gym.register(
    id="FlashNeRD-Velocity-Flat-Anymal-C-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.velocity.anymal_c:AnymalCFlatEnvCfg",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.anymal_c_velocity:AnymalCFlatPPORunnerCfg",
    },
)

gym.register(
    id="FlashNeRD-Velocity-Flat-Anymal-C-Play-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.velocity.anymal_c:AnymalCFlatEnvCfg_PLAY",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.anymal_c_velocity:AnymalCFlatPPORunnerCfg",
    },
)

gym.register(
    id="FlashNeRD-Velocity-Rough-Anymal-C-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.velocity.anymal_c:AnymalCRoughEnvCfg",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.anymal_c_velocity:AnymalCRoughPPORunnerCfg",
    },
)

gym.register(
    id="FlashNeRD-Velocity-Rough-Anymal-C-Play-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.velocity.anymal_c:AnymalCRoughEnvCfg_PLAY",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.anymal_c_velocity:AnymalCRoughPPORunnerCfg",
    },
)
