"""Installs three packages from one source tree: the core library, its task definitions and its agent configs."""

from setuptools import setup

setup(
    name="flashnerd",
    version="0.1.0",
    description="Fast streaming neural robot dynamics, vectorized task environments and RSL-RL training on them.",
    python_requires=">=3.10",
    package_dir={
        "flashnerd": "source/flashnerd",
        "flashnerd_tasks": "tasks",
        "flashnerd_agents": "agents",
    },
    packages=[
        "flashnerd",
        "flashnerd.robots",
        "flashnerd.sim",
        "flashnerd.dynamics",
        "flashnerd.envs",
        "flashnerd.cli",
        "flashnerd.cli.bench",
        "flashnerd.utils",
        "flashnerd.models",
        "flashnerd.contacts",
        "flashnerd.data",
        "flashnerd.training",
        "flashnerd.viz",
        "flashnerd.planning",
        "flashnerd_tasks",
        "flashnerd_tasks.climb",
        "flashnerd_tasks.reorient",
        "flashnerd_tasks.roll",
        "flashnerd_tasks.velocity",
        "flashnerd_agents",
    ],
    package_data={"flashnerd.robots": ["assets/*.xml", "assets/*.yaml"]},
    install_requires=[
        "torch>=2.4,<3",
        "mujoco>=4.0",  # mujoco.batch steps the coupled worlds
        "mujoco-warp>=4.0",
        "warp-lang>=1.10",
        "gymnasium>=1.0",
        "rsl-rl-lib>=5.5,<6",
        "tensorboard>=2.15",
        "h5py>=3.9",
        "pandas>=2.0",
        "pyarrow>=14",
        "rosbags>=0.11",  # ROS 2 bags (rosbag2, MCAP) as robot logs (data/rosbag.py)
        "safetensors>=0.4",
        "numpy>=1.26",
        "pyyaml>=6.0.4",  # merge keys without exponential growth (pyyaml#937)
        "regex>=2024.4",  # name patterns from files matched with a time limit (utils/name_patterns.py)
        "tqdm>=4.66",
        "matplotlib>=3.8",
        "onnx>=1.16",
        "imageio>=2.30",
        "imageio-ffmpeg>=0.5",
    ],
    extras_require={
        "test": ["pytest>=8", "ruff>=0.6", "hypothesis>=6", "mkdocs>=1.6", "mkdocs-material>=9.5",
                 "mkdocstrings[python]>=0.26"],
    },
    entry_points={"console_scripts": ["flashnerd=flashnerd.cli.main:main"]},
)
