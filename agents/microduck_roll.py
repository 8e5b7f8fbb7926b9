"""PPO for the Microduck forward roll."""

from flashnerd_agents.rsl_rl_cfg import RslRlOnPolicyRunnerCfg, RslRlPpoActorCriticCfg, RslRlPpoAlgorithmCfg


def MicroduckRollPPORunnerCfg() -> RslRlOnPolicyRunnerCfg:  # noqa: N802
    """24 steps per env, [128, 128, 128] ELU actor and critic, adaptive lr (KL 0.01), 300 iterations."""
    return RslRlOnPolicyRunnerCfg(
        experiment_name="microduck_roll",
        num_steps_per_env=24,
        max_iterations=300,
        save_interval=50,
        policy=RslRlPpoActorCriticCfg(
            init_noise_std=0.5, actor_hidden_dims=[128, 128, 128], critic_hidden_dims=[128, 128, 128],
            activation="elu", actor_obs_normalization=True, critic_obs_normalization=True,
        ),
        algorithm=RslRlPpoAlgorithmCfg(
            value_loss_coef=1.0, use_clipped_value_loss=True, clip_param=0.2, entropy_coef=0.005,
            num_learning_epochs=5, num_mini_batches=4, learning_rate=1.0e-3, schedule="adaptive",
            gamma=0.99, lam=0.95, desired_kl=0.01, max_grad_norm=1.0,
        ),
    )
