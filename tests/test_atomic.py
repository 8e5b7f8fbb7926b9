"""Outputs are written under a unique hidden temporary name and renamed into place: never torn, and never over a
file of the user's or another process's temporary."""

from __future__ import annotations

import pytest

from flashnerd.utils.atomic import atomic_path, temporary_path, write_text_atomic


def test_an_output_lands_whole_or_not_at_all_and_leaves_the_users_files_alone(tmp_path):
    out = tmp_path / "result.json"
    users = tmp_path / "result.json.tmp"  # a file of the user's that a fixed temporary name would overwrite
    users.write_text("mine")
    out.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert out.read_text() == "old"  # the earlier output stands; the half-written one is gone
    write_text_atomic(out, "new")
    assert out.read_text() == "new" and users.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json", "result.json.tmp"]


def test_two_writers_of_one_output_get_different_temporaries(tmp_path):
    first, second = temporary_path(tmp_path / "m.pt"), temporary_path(tmp_path / "m.pt")
    assert first != second and first.parent == tmp_path and first.name.startswith(".m.pt.")
    assert temporary_path(tmp_path / "v.mp4", suffix=".mp4").name.endswith(".tmp.mp4")  # the writer reads the suffix
