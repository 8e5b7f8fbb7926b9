"""Acrobatic skills. Registers FlashNeRD-Roll-* ids."""

import gymnasium as gym

gym.register(
    id="FlashNeRD-Roll-Flat-Microduck-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.roll.microduck:MicroduckRollEnvCfg",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.microduck_roll:MicroduckRollPPORunnerCfg",
    },
)

gym.register(
    id="FlashNeRD-Roll-Flat-Microduck-Play-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.roll.microduck:MicroduckRollEnvCfg_PLAY",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.microduck_roll:MicroduckRollPPORunnerCfg",
    },
)
