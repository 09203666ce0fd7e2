"""A sweep stopped half way keeps the points it finished (``points.jsonl`` in --out) and
``--resume`` runs only the rest, to the figures of a whole run. The Ray case (a cluster that
goes away mid-sweep) is in test_sweep_ray.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_sweep import figures, invoke  # tests/sim is on the path

from apportion.sim.model import Scenario
from apportion.sim.scenarios import get_scenario
from apportion.sim.sweep import Runner, run_point, run_sweep

AXES = {"lookback": [43200.0, 86400.0, 172800.0]}


def as_written(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` without their cost figures, as sweep.json holds them (JSON: tuples read
    back as lists)."""
    loaded: list[dict[str, Any]] = json.loads(json.dumps(figures(rows)))
    return loaded


def recorded_in(ran: list[float]) -> Runner:
    """``run_point``, recording in ``ran`` the lookback of each point it runs (the sweep
    runs it in this process with ``jobs=1``)."""

    def recording(sc: Scenario, settings: dict[str, Any], seed: int) -> dict[str, Any]:
        ran.append(settings["lookback"])
        return run_point(sc, settings, seed)

    return recording


def test_a_resumed_sweep_runs_only_the_points_not_kept_and_gives_a_whole_runs_figures(
    tmp_path: Path,
) -> None:
    """A 3-point sweep's points.jsonl cut back to its first point (as a sweep stopped after
    one point leaves it): with resume, only the other two points run (their lookbacks, in
    the runner's calls), and the rows are those of the whole run, the kept point's included."""
    scenario = get_scenario("small", days=2, seed=0)
    whole = run_sweep(scenario, {}, AXES, tmp_path, jobs=1, progress=False)
    journal = tmp_path / "points.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[1])["point"] in (0, 1, 2)
    journal.write_text("\n".join(lines[:2]) + "\n")
    kept = json.loads(lines[1])["point"]
    ran: list[float] = []
    recording = recorded_in(ran)
    resumed = run_sweep(scenario, {}, AXES, tmp_path, jobs=1, progress=False,
                        runner=recording, resume=True)
    assert sorted(ran) == [v for i, v in enumerate(AXES["lookback"]) if i != kept]
    assert as_written(resumed) == as_written(whole)
    assert len(journal.read_text().splitlines()) == 4  # the kept point and the two run


def test_a_last_line_cut_short_is_dropped_and_its_point_runs_again(tmp_path: Path) -> None:
    """points.jsonl whose last line was cut half way (the command killed while writing it):
    resume drops that line, runs its point again and gives the whole run's rows."""
    scenario = get_scenario("small", days=2, seed=0)
    whole = run_sweep(scenario, {}, AXES, tmp_path, jobs=1, progress=False)
    journal = tmp_path / "points.jsonl"
    text = journal.read_text()
    journal.write_text(text[: len(text) - 40])  # the last point's line, cut
    ran: list[float] = []
    recording = recorded_in(ran)
    resumed = run_sweep(scenario, {}, AXES, tmp_path, jobs=1, progress=False,
                        runner=recording, resume=True)
    assert len(ran) == 1
    assert as_written(resumed) == as_written(whole)


def test_resume_says_how_many_points_it_kept_and_runs(tmp_path: Path) -> None:
    """A 2-point sweep cut back to one kept point, then --resume: stderr says 1 of 2 points
    is kept from points.jsonl and 1 runs, and the command succeeds."""
    args = ("sweep", "--scenario", "small", "--days", "2", "--grid", "lookback=12h,1d",
            "--quiet", "--out", str(tmp_path))
    code, out, err = invoke(*args)
    assert code == 0, out + err
    journal = tmp_path / "points.jsonl"
    journal.write_text("\n".join(journal.read_text().splitlines()[:2]) + "\n")
    code, out, err = invoke(*args, "--resume")
    assert code == 0, out + err
    assert (f"sweep: --resume: 1 of 2 points kept from {journal}; running the other 1"
            in err)


def test_resume_refuses_the_points_of_another_sweep_and_runs_nothing(tmp_path: Path) -> None:
    """--resume after a sweep of other grid values into the same --out: exit 1, an error
    naming points.jsonl and saying why, and the file left as it was."""
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "2", "--grid",
                            "lookback=12h,1d", "--quiet", "--out", str(tmp_path))
    assert code == 0, out + err
    before = (tmp_path / "points.jsonl").read_text()
    code, out, err = invoke("sweep", "--scenario", "small", "--days", "2", "--grid",
                            "lookback=12h,2d", "--quiet", "--resume", "--out", str(tmp_path))
    assert code == 1
    assert (f"Error: --resume: {tmp_path / 'points.jsonl'} holds no points of this sweep "
            "(none was written, or it is of a sweep with other settings, grid, seeds or "
            "input); run without --resume") in err
    assert (tmp_path / "points.jsonl").read_text() == before


def test_a_sweep_run_again_without_resume_says_it_runs_the_kept_points_again(
    tmp_path: Path,
) -> None:
    """The same sweep run twice into the same --out without --resume: the second run warns
    that it runs again the 2 points the first one finished, runs them, and succeeds."""
    args = ("sweep", "--scenario", "small", "--days", "2", "--grid", "lookback=12h,1d",
            "--quiet", "--out", str(tmp_path))
    code, out, err = invoke(*args)
    assert code == 0 and "warning" not in err, out + err
    code, out, err = invoke(*args)
    assert code == 0, out + err
    assert (f"warning: {tmp_path / 'points.jsonl'}: the 2 points an earlier run of this sweep "
            "finished are run again (--resume would have kept them)") in err


def test_a_point_line_that_is_no_point_of_the_sweep_is_refused_naming_its_line(
    tmp_path: Path,
) -> None:
    """points.jsonl of this sweep whose second point line names point 7 of a 3-point sweep
    (a hand edit): resume refuses it naming the file and line 3, and runs nothing."""
    scenario = get_scenario("small", days=2, seed=0)
    run_sweep(scenario, {}, AXES, tmp_path, jobs=1, progress=False)
    journal = tmp_path / "points.jsonl"
    lines = journal.read_text().splitlines()
    lines[2] = json.dumps({"point": 7, "summary": {}})
    journal.write_text("\n".join(lines) + "\n")
    ran: list[float] = []
    with pytest.raises(RuntimeError) as refused:
        run_sweep(scenario, {}, AXES, tmp_path, jobs=1, progress=False,
                  runner=recorded_in(ran), resume=True)
    assert str(refused.value) == (f"{journal}, line 3: not a point of this sweep (a point's "
                                  "number, 0 to 2, and its summary)")
    assert ran == []
