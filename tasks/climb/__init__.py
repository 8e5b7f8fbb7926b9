"""Platform climbing. Registers FlashNeRD-Climb-* ids (`flashnerd plan` reads their `plan_cfg_entry_point`)."""

import gymnasium as gym

gym.register(
    id="FlashNeRD-Climb-Platform-Anymal-C-v0",
    entry_point="flashnerd.envs.core:FlashNeRDEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "flashnerd_tasks.climb.anymal_c:AnymalCClimbEnvCfg",
        "plan_cfg_entry_point": "flashnerd_tasks.climb.anymal_c:AnymalCClimbPlanCfg",
        "rsl_rl_cfg_entry_point": "flashnerd_agents.anymal_c_velocity:AnymalCFlatPPORunnerCfg",
    },
)
