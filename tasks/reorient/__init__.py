"""In-hand cube reorientation tasks. Registers FlashNeRD-Reorient-* ids."""

import gymnasium as gym

gym.register(
    id="FlashNeRD-Reorient-Cube-Allegro-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.reorient.allegro:AllegroCubeEnvCfg",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.allegro_reorient:AllegroCubePPORunnerCfg",
    },
)

gym.register(
    id="FlashNeRD-Reorient-Cube-Yaw-Allegro-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.reorient.allegro:AllegroCubeYawEnvCfg",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.allegro_reorient:AllegroCubePPORunnerCfg",
    },
)

gym.register(
    id="FlashNeRD-Reorient-Cube-Heavy-Allegro-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.reorient.allegro:AllegroCubeHeavyEnvCfg",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.allegro_reorient:AllegroCubePPORunnerCfg",
    },
)
