"""CartPole: a position-controlled cart on a rail with a free (unactuated) pole; a fixed-base toy system."""

from flashnerd.robots.spec import RobotSpec

CARTPOLE = RobotSpec(
    name="cartpole",
    mjcf="cartpole.xml",
    joint_names=("slider",),  # actuated joints only; qpos = qvel = (slider, hinge), the hinge is unactuated
    default_joint_pos=(0.0,),
    stiffness=100.0,
    damping=15.0,
    effort_limit=100.0,  # N on the slider
    init_base_height=0.0,
    floating_base=False,
    sim_dt=0.005,
    decimation=4,
    explore_amplitude=1.0,  # m of cart target around the rail centre
    init_joint_noise=(0.5, 3.14159),  # (slider m, hinge rad): poles start at any angle
    init_vel_noise=1.0,
)
