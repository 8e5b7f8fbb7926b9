"""`flashnerd report`: the committed results page matches its JSON, and a changed JSON changes the page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from flashnerd.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def test_committed_results_page_is_up_to_date(capsys):
    page, folder = ROOT / "docs" / "results.md", ROOT / "docs" / "results"
    assert main(["report", "--page", str(page), "--results", str(folder), "--check"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "bench_ppo_4096" in result["blocks"] and len(result["blocks"]) >= 3


def test_a_changed_measurement_changes_the_page(tmp_path, capsys):
    folder = tmp_path / "results"
    shutil.copytree(ROOT / "docs" / "results", folder)
    page = tmp_path / "results.md"
    page.write_text("# R\n\n<!-- report:bench_ppo_4096 -->\nstale\n<!-- /report -->\n")
    assert main(["report", "--page", str(page), "--results", str(folder), "--check"]) == 2
    assert "out of date" in capsys.readouterr().err
    assert main(["report", "--page", str(page), "--results", str(folder)]) == 0
    text = page.read_text()
    data = json.loads((folder / "bench_ppo_4096.json").read_text())
    fastest = min(data["backends"].values(), key=lambda r: r["seconds_per_iteration"])
    assert f"{fastest['seconds_per_iteration']:.2f}" in text and "stale" not in text
    assert (folder / "bench_ppo_4096.png").stat().st_size > 10_000
    assert main(["report", "--page", str(page), "--results", str(folder), "--check"]) == 0
    data["backends"]["mujoco"]["seconds_per_iteration"] *= 2
    (folder / "bench_ppo_4096.json").write_text(json.dumps(data))
    assert main(["report", "--page", str(page), "--results", str(folder), "--check"]) == 2
    assert main(["report", "--page", str(tmp_path / "missing.md"), "--results", str(folder)]) == 2


def test_a_malformed_measurement_is_a_one_line_error(tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "bench_ppo_x.json").write_text('{"backends": {"mujoco": {}}}')  # valid JSON, wrong content
    page = tmp_path / "results.md"
    text = "<!-- report:bench_ppo_x -->\nold\n<!-- /report -->\n"
    page.write_text(text)
    assert main(["report", "--page", str(page), "--results", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not the JSON that block 'bench_ppo_x' expects" in err[0]
    assert page.read_text() == text and sorted(p.name for p in folder.iterdir()) == ["bench_ppo_x.json"]


def test_a_block_that_fails_leaves_the_page_and_every_figure_as_they_were(tmp_path, capsys):
    """Blocks render one after another, and the first writes its figure: a later block's error must not leave that
    figure rebuilt from new numbers beside a page that still shows the old ones."""
    folder = tmp_path / "results"
    folder.mkdir()
    shutil.copy(ROOT / "docs" / "results" / "bench_ppo_4096.json", folder / "bench_ppo_a.json")
    page = tmp_path / "results.md"
    page.write_text("<!-- report:bench_ppo_a -->\nold\n<!-- /report -->\n")
    assert main(["report", "--page", str(page), "--results", str(folder)]) == 0
    figure = (folder / "bench_ppo_a.png").read_bytes()
    text = page.read_text() + "<!-- report:bench_ppo_b -->\nold\n<!-- /report -->\n"
    page.write_text(text)
    (folder / "bench_ppo_b.json").write_text('{"backends": {"mujoco": {}}}')
    data = json.loads((folder / "bench_ppo_a.json").read_text())
    data["backends"]["mujoco"]["seconds_per_iteration"] *= 3
    (folder / "bench_ppo_a.json").write_text(json.dumps(data))
    assert main(["report", "--page", str(page), "--results", str(folder)]) == 2
    assert "block 'bench_ppo_b' expects" in capsys.readouterr().err
    assert page.read_text() == text and (folder / "bench_ppo_a.png").read_bytes() == figure
    assert not list(folder.glob("*.tmp"))


def test_a_measurement_nested_too_deeply_is_a_one_line_error_naming_its_file(tmp_path, capsys):
    """JSON nested past Python's recursion limit is refused like any malformed measurement; `--check`, which renders
    a scratch copy of the folder, names the user's file, not the copy."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "bench_ppo_x.json").write_text("[" * 100_000 + "]" * 100_000)
    page = tmp_path / "results.md"
    page.write_text("<!-- report:bench_ppo_x -->\nold\n<!-- /report -->\n")
    for check in ([], ["--check"]):
        assert main(["report", "--page", str(page), "--results", str(folder), *check]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{folder / 'bench_ppo_x.json'} is not the JSON that block" in err[0], err


def test_an_incomplete_climb_run_renders_with_its_missing_platforms(tmp_path, capsys):
    """`flashnerd plan --out` writes after every platform: a backend that stopped early is marked, not misaligned."""
    folder = tmp_path / "results"
    folder.mkdir()
    data = json.loads((ROOT / "docs" / "results" / "platform_climb_before_fixes.json").read_text())
    nerd = data["backends"]["nerd"]
    nerd["per_platform"] = nerd["per_platform"][:2]
    nerd.update(platforms=2, climbs=sum(p["climbed"] for p in nerd["per_platform"]), complete=False)
    (folder / "platform_climb_part.json").write_text(json.dumps(data))
    page = tmp_path / "results.md"
    page.write_text("<!-- report:platform_climb_part -->\n<!-- /report -->\n")
    assert main(["report", "--page", str(page), "--results", str(folder)]) == 0
    row = next(line for line in page.read_text().splitlines() if line.startswith("| `nerd`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == f"{nerd['climbs']}/2 (incomplete)" and cells[-4:] == ["-"] * 4 and len(cells) == 4 + 6
    assert (folder / "platform_climb_part.png").stat().st_size > 10_000


def test_a_goal_task_over_seeds_gets_its_spread(tmp_path):
    """Fig. 8 over seeds: every run keeps its row, and each training backend gets its mean with the lowest and
    highest of its seeds, relative to the mean of the `mujoco` runs."""
    from flashnerd.viz.report import render_block

    folder = tmp_path / "results"
    folder.mkdir()
    data = json.loads((ROOT / "docs" / "results" / "cube_reorient.json").read_text())
    runs = {}
    for backend, targets, dropped in (("mujoco", 2.0, 0.0), ("mujoco", 4.0, 0.5), ("coupled", 1.5, 0.25),
                                      ("coupled", 4.5, 0.0)):
        seed = sum(r["backend"] == backend for r in runs.values()) + 1
        run = json.loads(json.dumps(data["backends"][backend]))
        run.update(backend=backend, seed=seed, targets_per_episode=targets)
        run["eval_mujoco"]["fall_rate"] = dropped
        runs[f"{backend}/seed{seed}"] = run
    data["backends"] = runs
    (folder / "cube_reorient_seeds.json").write_text(json.dumps(data))
    text = render_block("cube_reorient_seeds", folder)
    assert "| `coupled/seed1` |" in text and "| 1.50 | 50% | 25% |" in text  # 1.5 of the mujoco mean, 3.0
    assert "| `mujoco` | 2 | 3.00 (2.00 - 4.00) | 100% (67% - 133%) | 25% (0% - 50%) |" in text
    assert "| `coupled` | 2 | 3.00 (1.50 - 4.50) | 100% (50% - 150%) | 12% (0% - 25%) |" in text
    assert (folder / "cube_reorient_seeds.png").read_bytes()[:4] == b"\x89PNG"


def test_a_time_budgeted_run_shows_its_iterations_time_and_terrain_level(tmp_path):
    """Runs of equal training time (bench ppo --max_seconds): each row gains the iterations it got, its training
    seconds and what the env's trackers showed at the end; a run without those logs shows a dash."""
    from flashnerd.viz.report import render_block

    folder = tmp_path / "results"
    folder.mkdir()
    data = json.loads((ROOT / "docs" / "results" / "bench_ppo_4096.json").read_text())
    data["max_seconds"] = 900.0
    data["backends"]["flashnerd"]["tracker_state"] = {"Curriculum/terrain_levels": 2.375}
    (folder / "bench_ppo_rough.json").write_text(json.dumps(data))
    text = render_block("bench_ppo_rough", folder)
    flash, mujoco = data["backends"]["flashnerd"], data["backends"]["mujoco"]
    assert "or 900 s of training, whichever ends first" in text and "terrain levels at the end |" in text
    assert f"| `flashnerd` | {len(flash['curve'])} | {flash['total_seconds']:.0f} |" in text
    assert text.split("| `flashnerd` |")[1].split("\n")[0].endswith(" 2.38 |")
    assert text.split("| `mujoco` |")[1].split("\n")[0].endswith(f"{mujoco['eval_mujoco']['fall_rate']:.2f} | - |")


def test_each_timing_names_the_machine_it_ran_on(tmp_path):
    """Runs of one file timed on different machines (joined over sessions with --resume) say so, each run under its
    machine; a file from before machines were recorded renders as before; the CPU's name and instruction sets come
    from /proc/cpuinfo's first processor."""
    from flashnerd.utils.machine import cpu_description
    from flashnerd.viz.report import render_block

    folder = tmp_path / "results"
    folder.mkdir()
    data = json.loads((ROOT / "docs" / "results" / "bench_ppo_4096.json").read_text())
    (folder / "bench_ppo_old.json").write_text(json.dumps(data))
    assert "Timed on" not in render_block("bench_ppo_old", folder)
    data["backends"]["flashnerd"]["machine"] = "CPU A, 2 cores (avx2)"
    (folder / "bench_ppo_mixed.json").write_text(json.dumps(data))
    text = render_block("bench_ppo_mixed", folder)
    assert "Timed on: a machine not recorded (`mujoco`, `nerd`); CPU A, 2 cores (avx2) (`flashnerd`)." in text
    for run in data["backends"].values():
        run["machine"] = "CPU A, 2 cores (avx2)"
    (folder / "bench_ppo_one.json").write_text(json.dumps(data))
    assert "Timed on CPU A, 2 cores (avx2)." in render_block("bench_ppo_one", folder)
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some  CPU @ 2.0GHz\nflags\t\t: fpu avx2 avx512f amx_tile\n\n"
                    "processor\t: 1\nmodel name\t: Other CPU\nflags\t\t: fpu\n")
    described = cpu_description(str(info))
    assert described.startswith("Some CPU @ 2.0GHz, ") and described.endswith("cores (avx2, avx512, amx)")
    assert "unknown" not in cpu_description(str(tmp_path / "missing"))  # no cpuinfo: Python's platform names it


def test_a_run_that_learned_nothing_has_no_time_to_its_own_target(tmp_path):
    """Fig. 5 over seeds: a run ending no better in MuJoCo than its first saved policy is marked `no gain` (its first
    policy would otherwise read as the fastest run), and its backend's mean is over its other runs."""
    from flashnerd.cli.bench.ppo import time_to_target
    from flashnerd.viz.report import render_block

    folder = tmp_path / "results"
    folder.mkdir()
    data = json.loads((ROOT / "docs" / "results" / "bench_ppo_4096.json").read_text())
    runs = {}
    for backend, seed, final, curve in (("mujoco", 1, 20.0, [[10, 3.0], [20, 19.0]]),
                                        ("nerd", 1, 3.0, [[30, 3.5], [60, 2.5]]),  # no gain
                                        ("nerd", 2, 9.0, [[30, 3.5], [60, 8.5]])):
        run = json.loads(json.dumps(data["backends"][backend]))
        run.update(backend=backend, seed=seed, mujoco_curve=curve + [[90, final]])
        run["eval_mujoco"]["mean_return"] = final
        runs[f"{backend}/seed{seed}"] = run
    runs["mujoco/seed2"] = {**runs["mujoco/seed1"], "seed": 2, "mujoco_curve": [[10, 20.0]]}  # one point: not judged
    data.update(backends=runs, eval_every=1, time_to_target=time_to_target(runs, 0.9))
    assert data["time_to_target"]["no_gain"] == ["nerd/seed1"]
    (folder / "bench_ppo_gain.json").write_text(json.dumps(data))
    text = render_block("bench_ppo_gain", folder)
    assert "| `nerd` | 2 | 6.0 (3.0 - 9.0) | 60 (no gain, 60) |" in text
    assert "No gain: `nerd/seed1`: the run ended no better in MuJoCo than the first policy it saved" in text


def test_a_reality_gap_table_reads_each_policy_as_a_share_of_the_oracle(tmp_path):
    """Issue 26's bar reads a policy's return in the variant as a share of the oracle's: every row of the table gets
    it, and none when the oracle's return is not positive (a share of a negative return says nothing)."""
    from flashnerd.viz.report import render_block

    folder = tmp_path / "results"
    folder.mkdir()
    data = json.loads((ROOT / "docs" / "results" / "reality_gap_laggy_dr.json").read_text())
    oracle = data["baselines"]["oracle"]["eval_variant"]
    oracle["mean_return"] = 8.0
    data["budgets"][-1]["rounds"][0]["eval_variant"]["mean_return"] = 7.2
    (folder / "reality_gap_x.json").write_text(json.dumps(data))
    text = render_block("reality_gap_x", folder)
    assert "| oracle: PPO on the variant | - |" in text and "| 8.0 | 100% |" in text
    assert "round 0 | 4.8 |" in text and "| 7.2 | 90% |" in text
    oracle["mean_return"] = -1.0
    (folder / "reality_gap_x.json").write_text(json.dumps(data))
    text = render_block("reality_gap_x", folder)
    policies = [line.split(" | ") for line in text.split("NRMSE")[0].splitlines() if line.startswith("| ")][1:]
    assert len(policies) == 9 and all(cells[4] == "-" for cells in policies)
