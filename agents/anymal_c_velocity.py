"""PPO for ANYmal-C flat velocity tracking (Isaac Lab's `AnymalCFlatPPORunnerCfg` settings)."""

from flashnerd_agents.rsl_rl_cfg import RslRlOnPolicyRunnerCfg, RslRlPpoActorCriticCfg, RslRlPpoAlgorithmCfg


def AnymalCFlatPPORunnerCfg() -> RslRlOnPolicyRunnerCfg:  # noqa: N802  (named like the Isaac Lab class)
    """24 steps per env, 600 iterations, [128, 128, 128] ELU actor and critic, adaptive lr with KL 0.01.

    600 iterations of 1024 envs (the task's default) take about 15 minutes on a 2-core CPU with the `flashnerd`
    backend (Isaac Lab: 300 iterations of 4096 envs on a GPU).

    init_noise_std is 0.5 (Isaac Lab: 1.0): with MuJoCo's stiff ideal PD actuator, unit-std exploration jerks the
    joints so hard that torque and acceleration penalties swamp the tracking reward at the start (measured).
    """
    return RslRlOnPolicyRunnerCfg(
        experiment_name="anymal_c_flat",
        num_steps_per_env=24,
        max_iterations=600,
        save_interval=50,
        policy=RslRlPpoActorCriticCfg(
            init_noise_std=0.5, actor_hidden_dims=[128, 128, 128], critic_hidden_dims=[128, 128, 128],
            activation="elu", actor_obs_normalization=False, critic_obs_normalization=False,
        ),
        algorithm=RslRlPpoAlgorithmCfg(
            value_loss_coef=1.0, use_clipped_value_loss=True, clip_param=0.2, entropy_coef=0.005,
            num_learning_epochs=5, num_mini_batches=4, learning_rate=1.0e-3, schedule="adaptive",
            gamma=0.99, lam=0.95, desired_kl=0.01, max_grad_norm=1.0,
        ),
    )


def AnymalCRoughPPORunnerCfg() -> RslRlOnPolicyRunnerCfg:  # noqa: N802
    """The flat configuration with Isaac Lab's rough-terrain settings: 1500 iterations, [512, 256, 128] ELU actor and
    critic (the height scan adds 187 inputs)."""
    cfg = AnymalCFlatPPORunnerCfg()
    cfg.experiment_name = "anymal_c_rough"
    cfg.max_iterations = 1500
    cfg.policy.actor_hidden_dims = [512, 256, 128]
    cfg.policy.critic_hidden_dims = [512, 256, 128]
    return cfg
