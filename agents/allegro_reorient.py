"""PPO for in-hand cube reorientation (Isaac Lab's `AllegroCubePPORunnerCfg` settings, sized for a CPU)."""

from flashnerd_agents.rsl_rl_cfg import RslRlOnPolicyRunnerCfg, RslRlPpoActorCriticCfg, RslRlPpoAlgorithmCfg


def AllegroCubePPORunnerCfg() -> RslRlOnPolicyRunnerCfg:  # noqa: N802  (named like the Isaac Lab class)
    """24 steps per env, [512, 256, 128] ELU actor and critic with observation normalization, adaptive lr (KL 0.016).

    Isaac Lab trains this task for 5000 iterations of 8192 envs on a GPU; the 300 here are a CPU-sized start."""
    return RslRlOnPolicyRunnerCfg(
        experiment_name="allegro_cube",
        num_steps_per_env=24,
        max_iterations=300,
        save_interval=50,
        policy=RslRlPpoActorCriticCfg(
            init_noise_std=1.0, actor_hidden_dims=[512, 256, 128], critic_hidden_dims=[512, 256, 128],
            activation="elu", actor_obs_normalization=True, critic_obs_normalization=True,
        ),
        algorithm=RslRlPpoAlgorithmCfg(
            value_loss_coef=1.0, use_clipped_value_loss=True, clip_param=0.2, entropy_coef=0.002,
            num_learning_epochs=5, num_mini_batches=4, learning_rate=1.0e-3, schedule="adaptive",
            gamma=0.998, lam=0.95, desired_kl=0.016, max_grad_norm=1.0,
        ),
    )
