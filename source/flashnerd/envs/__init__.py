"""Batched torch task environments: term-based configs, the env core, commands and the RSL-RL wrapper."""

from flashnerd.envs.config import DoneTerm, EnvCfg, EventTerm, ObsGroup, ObsTerm, RewTerm, VelocityCommandCfg
from flashnerd.envs.core import FlashNeRDEnv

__all__ = ["DoneTerm", "EnvCfg", "EventTerm", "FlashNeRDEnv", "ObsGroup", "ObsTerm", "RewTerm", "VelocityCommandCfg"]
