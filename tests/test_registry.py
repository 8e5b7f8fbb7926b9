"""The backend registry: capabilities, typed configs, and one-line errors for names and keywords a backend lacks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flashnerd.cli.main import main
from flashnerd.dynamics import (
    REFERENCE_BACKEND,
    Dynamics,
    ObjectDynamics,
    available_backends,
    backend_info,
    backend_names,
    check_backend,
    make_dynamics,
)
from flashnerd.dynamics.coupled import OracleFreeMotion
from flashnerd.models import MODEL_KINDS
from flashnerd.robots import get_robot


def test_capabilities_answer_the_questions_callers_ask():
    assert backend_names(analytical=True) == ["mujoco", "mjwarp"]
    assert backend_names(learned=True, objects=False) == list(MODEL_KINDS)
    assert set(backend_names(objects=True)) == {"mujoco", "mjwarp", "coupled", "oneway"}
    assert set(backend_names(planning=True)) == {"mujoco", "mjwarp", *MODEL_KINDS}
    assert set(backend_names(checkpoint=True)) == {*MODEL_KINDS, "coupled", "oneway"}
    assert backend_info(REFERENCE_BACKEND).analytical
    for name in available_backends():
        info = backend_info(name)
        assert info.name == name and info.label
        assert dataclasses.is_dataclass(info.config)
        assert (info.model_kind in MODEL_KINDS) == (info.learned and not info.objects)
        assert info.checkpoint == ("checkpoint" in info.options())
    with pytest.raises(ValueError, match="unknown backend capability 'fast'"):
        backend_names(fast=True)
    with pytest.raises(ValueError, match="recording needs one of the backends mujoco, mjwarp; 'nerd' is not one"):
        check_backend("nerd", what="recording", analytical=True)


@pytest.mark.parametrize("name", sorted(available_backends()))
def test_every_backend_refuses_a_keyword_it_does_not_take_in_one_line(name, anymal):
    """Checked before anything is built: the error names the keyword and lists the backend's options."""
    with pytest.raises(ValueError) as err:
        make_dynamics(name, anymal, 1, dynamics_checkpoint="x.safetensors")
    message = str(err.value)
    assert "\n" not in message and "'dynamics_checkpoint'" in message
    assert ", ".join(backend_info(name).options()) in message


def test_unknown_names_devices_and_world_counts_are_one_line_errors(anymal):
    with pytest.raises(ValueError, match="unknown dynamics backend 'physx'; choose one of: coupled, flashnerd"):
        make_dynamics("physx", anymal, 1)
    with pytest.raises(ValueError, match="num_worlds must be at least 1"):
        make_dynamics("mujoco", anymal, 0)
    with pytest.raises(ValueError, match="runs on cpu, cuda, not 'meta'"):
        make_dynamics("mujoco", anymal, 1, device="meta")


def test_built_backends_implement_the_whole_seam(anymal):
    hand = get_robot("allegro")
    built = [make_dynamics("mujoco", anymal, 2, nthread=1), make_dynamics("flashnerd", anymal, 2),
             make_dynamics("mujoco", hand, 2, nthread=1, objects=("cube",)),
             make_dynamics("coupled", hand, 2, free_motion=OracleFreeMotion(hand, 2), nthread=1)]
    for dyn in built:
        assert isinstance(dyn, Dynamics), type(dyn).__name__
        assert dyn.nq == dyn.scene.nq and dyn.nu == dyn.scene.nu
        qpos0 = torch.as_tensor(dyn.default_qpos(), dtype=torch.float32)
        assert torch.allclose(dyn.state().qpos[0], qpos0)  # every world starts standing
        dyn.close()
    assert isinstance(built[2], ObjectDynamics) and isinstance(built[3], ObjectDynamics)
    assert not isinstance(built[1], ObjectDynamics)


def test_the_coupled_backends_refuse_a_scene_they_do_not_simulate():
    hand = get_robot("allegro")
    motion = OracleFreeMotion(hand, 1)
    with pytest.raises(ValueError, match="not terrain 'platforms'"):
        make_dynamics("oneway", hand, 1, terrain="platforms", free_motion=motion)
    with pytest.raises(ValueError, match="simulates one cube"):
        make_dynamics("coupled", hand, 1, objects=("cube", "ball"), free_motion=motion)


@pytest.mark.parametrize("argv", [
    ["train", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--dynamics", "mjwarp", "--dynamics_checkpoint", "x"],
    ["eval", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--dynamics_checkpoint", "x"],
    ["train", "--task", "FlashNeRD-Velocity-Flat-Anymal-C-v0", "--dynamics", "physx"],
    ["record", "--out", "never.h5", "--dynamics", "flashnerd"],
    ["plan", "--dynamics", "coupled"],
])
def test_cli_backend_errors_are_one_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    usage_error = False
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's choices error: its usage lines, then one error line
        code, usage_error = exit_.code, True
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"flashnerd {argv[0]}: error:") and (usage_error or len(err) == 1), err
    assert not list(tmp_path.iterdir())  # nothing left behind


@pytest.mark.parametrize("name, options, message", [
    ("mujoco", {"nthread": "abc"}, "is not of type int or None"),
    ("mujoco", {"nthread": 0}, "must be a positive number"),
    ("mujoco", {"cube_mass": float("nan")}, "must be a positive number"),
    ("mujoco", {"objects": "cube"}, "is not of type tuple"),
    ("flashnerd", {"checkpoint": 3}, "is not of type str or Path or None"),
    ("flashnerd", {"compile": "yes"}, "is not of type bool"),
])
def test_an_option_of_the_wrong_type_or_range_is_a_one_line_error(anymal, name, options, message):
    with pytest.raises(ValueError, match=message):
        make_dynamics(name, anymal, 1, **options)
