"""FlashNeRD: fast streaming neural robot dynamics, task environments and RSL-RL training on any dynamics backend."""

__version__ = "0.1.0"
