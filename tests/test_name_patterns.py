"""Name regexes from spec and variant files are matched with a time limit: a pattern that backtracks without end is a
one-line error, not a hung command."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flashnerd.utils import name_patterns
from flashnerd.utils.name_patterns import NamePatternError, compiled, name_matches


@pytest.fixture(autouse=True)
def fresh_budget(monkeypatch):
    """Each test starts with nothing spent and no remembered matches (a remembered match runs no timer)."""
    monkeypatch.setattr(name_patterns, "_spent", 0.0)
    name_matches.cache_clear()
    yield
    name_matches.cache_clear()


def test_name_patterns_match_in_full_as_re_does():
    assert name_matches(r".*_(HAA|HFE|KFE)", "LF_HAA")
    assert not name_matches(r".*_(HAA|HFE)", "LF_HAA_extra")
    assert not name_matches(r"LF", "LF_HAA")  # in full, not a prefix
    with pytest.raises(NamePatternError, match=r"'\(' is not a valid regex"):
        compiled("(")


def test_a_pattern_that_backtracks_without_end_is_refused_within_its_time_limit():
    """(x|xx)+ on 40 x's splits them in 165,580,141 ways before the digit fails: hours under Python's `re`."""
    start = time.perf_counter()
    with pytest.raises(NamePatternError, match=r"takes more than 1 s to match the name 'x{40}'"):
        name_matches(r"(x|xx)+\d", "x" * 40)
    assert time.perf_counter() - start < 10 * name_patterns.MATCH_SECONDS


def test_variant_and_spec_files_report_a_slow_pattern_in_one_line(monkeypatch, tmp_path, capsys):
    """The readers of both kinds of file go through the limit (here made zero, so that any match runs out of time)."""
    from flashnerd.cli.main import main

    monkeypatch.setattr(name_patterns, "MATCH_SECONDS", 0.0)
    variant = tmp_path / "v.yaml"
    variant.write_text("robot: anymal_c\nmass_scale: {'.*THIGH': 1.1}\n")
    spec = tmp_path / "r.yaml"
    hound = Path(__file__).resolve().parent / "assets" / "hound" / "hound.xml"
    spec.write_text(f"mjcf: {hound}\ncontact_bodies: {{feet: '.*_foot'}}\n")
    for argv, pattern in ((["record", "--num_worlds", "2", "--steps", "4", "--traj_len", "4", "--robot_variant",
                            str(variant), "--out", str(tmp_path / "r.h5")], ".*THIGH"),
                          (["record", "--robot", str(spec), "--num_worlds", "2", "--steps", "4", "--traj_len", "4",
                            "--out", str(tmp_path / "r.h5")], ".*_foot")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert f"'{pattern}' takes more than 0 s to match the name" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "r.h5").exists()


def test_many_slow_patterns_share_one_budget_per_process(monkeypatch):
    """Matches within the limit per name that together pass the total are cut at the total (here the limit per name
    is raised above the total, so the slow pattern's match runs into what is left of the total)."""
    monkeypatch.setattr(name_patterns, "MATCH_SECONDS", 100.0)
    monkeypatch.setattr(name_patterns, "TOTAL_MATCH_SECONDS", 1.5)
    assert name_matches(".*_HAA", "LF_HAA")  # quick ones spend next to nothing
    start = time.perf_counter()
    with pytest.raises(NamePatternError, match=r"more than 1.5 s of matching in all, the last '\(x\|xx\)\+\\d' on"):
        name_matches(r"(x|xx)+\d", "x" * 40)
    assert time.perf_counter() - start < 5.0
    with pytest.raises(NamePatternError, match=r"more than 1.5 s of matching in all, the last 'LF_.*'"):
        name_matches("LF_.*", "LF_HAA")  # spent: even a quick pattern is refused now


def test_a_name_matched_once_is_remembered():
    assert name_matches(".*_HAA", "LF_HAA")
    spent = name_patterns._spent
    for _ in range(1000):
        assert name_matches(".*_HAA", "LF_HAA")
    assert name_patterns._spent == spent
