"""Trace import: canonical files, ITP, sacct and mapped CSV into simulator jobs and budgets."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from apportion.core import BudgetNode, BudgetTree, PolicyConfig, WorkloadSpec, is_debug
from apportion.sim.model import LegacyPriority, SimJob
from apportion.sim.scenarios import seed_scenario
from apportion.sim.traces import (
    NoBudgetColumn,
    TraceError,
    default_min_runtime,
    load_trace,
    parse_duration,
    parse_mapping,
    parse_tres,
    stable_bucket,
    write_canonical,
)
from apportion.sim.traces._read import delimiter_of

DATA = Path(__file__).parent / "data"
# a verbatim copy of microsoft/elasticflow-traces cluster10.csv (MIT, see data/itp/LICENSE)
CLUSTER10 = DATA / "itp" / "cluster10.csv"
SACCT = DATA / "sacct_sample.txt"
HOUR = 3600.0


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def big_itp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ITP-format trace of 6,000 jobs, made up (same columns as the real files)."""
    path = tmp_path_factory.mktemp("itp") / "big.csv"
    lines = ["job_id,submission_time,duration,num_gpu"]
    lines += [f"job-{i:05d},{i * 60},{600 + (i * 7919) % 90000},{2 ** (i % 6)}"
              for i in range(6000)]
    path.write_text("\n".join(lines))
    return path


def by_id(jobs: tuple[SimJob, ...]) -> dict[str, SimJob]:
    return {j.spec.id: j for j in jobs}


# ---- ITP ---------------------------------------------------------------------------------
def test_itp_imports_every_row_of_a_real_cluster_trace() -> None:
    """cluster10.csv: one job per data row, with the file's ids, GPUs, durations and times."""
    with CLUSTER10.open(newline="") as f:
        rows = list(csv.DictReader(f))
    trace = load_trace(CLUSTER10, format="itp", budgets=4)
    assert len(trace.jobs) == len(rows) == 260
    assert trace.n_skipped == 0 and trace.warnings == ()
    jobs = by_id(trace.jobs)
    for row in rows:
        job = jobs[row["job_id"]]
        assert job.spec.gpus == int(row["num_gpu"])
        assert job.duration == float(row["duration"])
        assert job.spec.submit_time == float(row["submission_time"])
    assert sum(j.spec.gpus for j in trace.jobs) == sum(int(r["num_gpu"]) for r in rows)


def test_itp_rebase_starts_the_trace_at_zero() -> None:
    """rebase subtracts the first submit time and reports it as time_origin."""
    trace = load_trace(CLUSTER10, format="itp", budgets=4, rebase=True)
    assert trace.jobs[0].spec.submit_time == 0.0
    assert trace.time_origin == 2266647.0


def test_itp_without_budget_options_is_an_error_naming_the_options() -> None:
    """ITP has no budget or user column, so the caller must say how to make budgets."""
    with pytest.raises(TraceError, match=r"cluster10.csv: budget: .*budgets=N"):
        load_trace(CLUSTER10, format="itp")


@pytest.mark.parametrize("fmt", ["itp", "csv"])
@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".jsonl.gz"])
def test_itp_and_csv_formats_read_parquet_and_json_lines_by_the_file_name(
        tmp_path: Path, fmt: str, ext: str) -> None:
    """--format itp and csv read a .parquet or .jsonl(.gz) file as Parquet or JSON Lines, as
    canonical does, not as CSV (which reported a Parquet file's bytes as 'not UTF-8 text'):
    cluster10.csv saved in that form loads the same jobs as the CSV itself."""
    import pyarrow.csv as pacsv

    table = pacsv.read_csv(CLUSTER10)
    path = tmp_path / f"cluster10{ext}"
    if ext == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    else:
        lines = "".join(f"{json.dumps(r)}\n" for r in table.to_pylist())
        opener = gzip.open if ext.endswith(".gz") else open
        with opener(path, "wt") as f:
            f.write(lines)
    mapping = None if fmt == "itp" else {"id": "job_id", "submit_time": "submission_time",
                                         "gpus": "num_gpu"}
    want = load_trace(CLUSTER10, format=fmt, mapping=mapping, budgets=4).jobs
    assert load_trace(path, format=fmt, mapping=mapping, budgets=4).jobs == want


def test_csv_format_reads_a_file_of_no_known_name_as_csv(tmp_path: Path) -> None:
    """--format csv and itp still read a CSV named otherwise (jobs.txt) as CSV."""
    path = tmp_path / "jobs.txt"
    path.write_bytes(CLUSTER10.read_bytes())
    assert len(load_trace(path, format="itp", budgets=4).jobs) == 260


@pytest.mark.parametrize(("name", "fmt"), [("t.csv.gz", "canonical"),
                                            ("t.jsonl.gz", "canonical"),
                                            ("jobs.txt.gz", "sacct")])
def test_a_damaged_gzip_trace_is_a_trace_error_naming_the_file(
        tmp_path: Path, name: str, fmt: str) -> None:
    """A .gz trace cut short (a partial copy) or not gzip at all is a TraceError naming the
    file and what is wrong: gzip raised EOFError, which the command line reported as a bare
    'Aborted!', and BadGzipFile, a traceback."""
    text = (SACCT.read_text() if fmt == "sacct"
            else "submit_time,gpus,duration,budget\n" + "0,8,1h,a\n" * 2000)
    if name.startswith("t.jsonl"):
        text = '{"submit_time": 0, "gpus": 8, "duration": "1h", "budget": "a"}\n' * 2000
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode())[:40])
    with pytest.raises(TraceError, match=r"^.*: gzip: the compressed data ends early"):
        load_trace(path, format=fmt)
    path.write_text(text[:500])
    with pytest.raises(TraceError, match=r"^.*: gzip: not a gzip file, though its name ends "
                       r"in \.gz$") as e:
        load_trace(path, format=fmt)
    assert str(e.value).startswith(f"{path}: ")


@pytest.mark.parametrize(("header", "mapping", "column"), [
    ("budget", None, "budget"), ("Budget", None, "Budget"), ("team", {"budget": "team"}, "team")])
def test_a_budget_column_empty_on_every_row_is_named_as_empty(
        tmp_path: Path, header: str, mapping: dict[str, str] | None, column: str) -> None:
    """A trace whose budget column is there but empty on every row (and names no users)
    is a NoBudgetColumn naming that column as empty, not 'the trace has no budget
    column', which the user, looking at the column, could not make sense of."""
    path = write(tmp_path, "t.csv", f"id,submit_time,gpus,duration,{header}\na,0,8,1h,\n")
    with pytest.raises(NoBudgetColumn) as e:
        load_trace(path, mapping=mapping)
    assert str(e.value).startswith(
        f"{path}: {column}: the budget column is empty on every row; pass budgets=N")
    assert e.value.empty == column


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_json_lines_trace_is_refused_as_empty(tmp_path: Path, text: str) -> None:
    """A JSON Lines trace with no object (empty, or blank lines only) is refused as an
    empty file, as an empty CSV is, not as missing every column ('submit_time: required
    column missing (columns: )')."""
    path = write(tmp_path, "t.jsonl", text)
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value) == f"{path}: row: the file is empty (no JSON objects)"


# ---- canonical round trips ---------------------------------------------------------------
@pytest.mark.parametrize("ext", [".csv", ".jsonl", ".parquet", ".csv.gz", ".tsv", ".tsv.gz"])
def test_canonical_round_trip(tmp_path: Path, ext: str) -> None:
    """write_canonical then load_trace gives back the same jobs and the same budget tree."""
    original = load_trace(
        CLUSTER10, format="itp", budgets=3, unallocated_fraction=0.2, rebase=True
    )
    path = write_canonical(original.jobs, tmp_path / f"trace{ext}")
    again = load_trace(path)
    assert again.jobs == original.jobs
    assert again.tree.leaves == original.tree.leaves


def test_a_tsv_trace_is_written_with_tabs() -> None:
    """.tsv and .tsv.gz are tab-separated, as they are read (.tsv was written with commas,
    and then not read back; .tsv.gz was read with commas)."""
    assert (delimiter_of(Path("t.tsv")), delimiter_of(Path("t.TSV.gz"))) == ("\t", "\t")
    assert delimiter_of(Path("t.csv.gz")) == ","


@pytest.mark.parametrize("name", ["t.txt", "t.parquet.gz", "t"])
def test_a_trace_name_of_no_known_kind_is_refused_listing_the_names_taken(
        tmp_path: Path, name: str) -> None:
    """A name with no known ending (or Parquet gzipped) is refused by the writer and the
    reader with every ending they take, .tsv, .ndjson, .json, .pq and .gz included (the
    message named .csv, .jsonl and .parquet only)."""
    want = (f"{tmp_path / name}: format: cannot tell the file type from its name (use .csv, "
            ".tsv, .jsonl, .ndjson or .json, each with or without .gz, or .parquet or .pq)")
    original = load_trace(CLUSTER10, format="itp", budgets=3, rebase=True)
    with pytest.raises(TraceError) as e:
        write_canonical(original.jobs, tmp_path / name)
    assert str(e.value) == want
    (tmp_path / name).write_text("id\n")
    with pytest.raises(TraceError) as e:
        load_trace(tmp_path / name)
    assert str(e.value) == want


def test_round_trip_keeps_legacy_level_and_squat(tmp_path: Path) -> None:
    """Jobs whose old-scheduler level differs from what their priority implies, and squatters,
    survive a round trip (the extra columns are written only then)."""
    base = load_trace(DATA / "canonical_iso.jsonl").jobs[1]
    odd = SimJob(base.spec, base.duration, LegacyPriority.URGENT, False, squat=True)
    path = write_canonical([odd], tmp_path / "t.csv")
    assert path.read_text().splitlines()[0].endswith(",legacy_priority,squat")
    assert load_trace(path).jobs == (odd,)


# fields the canonical format has no column for (docs/traces.md, "Writing")
NOT_IN_TRACES = ("spec.hosts", "hold")


def job_fields(job: SimJob) -> dict[str, object]:
    """Every field of ``job`` and of its spec, by name (``spec.gpus``, ``patience``)."""
    out = {f"spec.{f.name}": getattr(job.spec, f.name) for f in dataclasses.fields(job.spec)}
    out.update({f.name: getattr(job, f.name) for f in dataclasses.fields(job)
                if f.name != "spec"})
    return out


def defaults() -> dict[str, object]:
    """The default of every field of a SimJob and of its spec that has one."""
    return {f"{where}{f.name}": f.default
            for where, cls in (("spec.", WorkloadSpec), ("", SimJob))
            for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


@pytest.mark.parametrize("ext", [".csv", ".jsonl", ".parquet"])
def test_a_generated_scenario_round_trips_every_field_of_every_job(
        tmp_path: Path, ext: str) -> None:
    """A 3-day seed scenario (checkpoint_on_term and patience set on some jobs), with time
    limits, priorities, GPU kinds and clusters added to some: write_canonical then
    load_trace gives back
    every field of every job, field by field, but the two the format has no column for
    (NOT_IN_TRACES). Every other field with a default is off its default on some job, so a
    field added to SimJob or WorkloadSpec fails here until the format carries it
    (patience, checkpoint_on_term and time_limit were dropped)."""
    jobs = list(seed_scenario(days=3, size=64).jobs)
    for i in range(0, len(jobs), 5):
        jobs[i] = dataclasses.replace(jobs[i], spec=dataclasses.replace(
            jobs[i].spec, time_limit=3600.0 * (1 + i % 7), priority=i % 3 - 1,
            gpu_kinds=("H100", "B200"), cluster="east"))
    fields = {name: [job_fields(j)[name] for j in jobs]
              for name in job_fields(jobs[0]) if name not in NOT_IN_TRACES}
    assert [name for name, default in defaults().items()
            if name in fields and all(v == default for v in fields[name])] == []
    path = write_canonical(jobs, tmp_path / f"seed{ext}")
    back = by_id(load_trace(path).jobs)
    assert sorted(back) == sorted(j.spec.id for j in jobs)
    changed = [(j.spec.id, name, value, job_fields(back[j.spec.id])[name])
               for j in jobs for name, value in job_fields(j).items()
               if name not in NOT_IN_TRACES and job_fields(back[j.spec.id])[name] != value]
    assert changed[:5] == []


def test_patience_must_be_longer_than_zero(tmp_path: Path) -> None:
    """A patience of 0 is refused at its line (an owner who waits forever leaves it empty,
    read as None), as time_limit and checkpoint_on_term are read as given."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration,budget,patience,time_limit,"
                 "checkpoint_on_term\n0,1,60,a,,2h,yes\n0,1,60,a,0,,\n")
    with pytest.raises(TraceError) as e:
        load_trace(path)
    assert str(e.value) == (
        f"{path}:3: patience: must be a duration > 0 (empty: waits forever), got '0'")
    path.write_text(path.read_text().replace("a,0,,", "a,30m,,"))
    first, second = load_trace(path).jobs
    assert (first.patience, first.spec.time_limit, first.spec.checkpoint_on_term) == (
        None, 7200.0, True)
    assert (second.patience, second.spec.time_limit, second.spec.checkpoint_on_term) == (
        1800.0, 0.0, False)


def test_a_clock_duration_with_a_field_out_of_range_is_refused_at_its_line(
    tmp_path: Path,
) -> None:
    """A trace's ``min_runtime`` of ``99:99`` is refused at its file, line and field, naming
    the value and the field out of range (it was read as 6,039 s)."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration,budget,min_runtime\n"
                 "0,1,60,a,30:00\n0,1,60,a,99:99\n")
    with pytest.raises(TraceError) as e:
        load_trace(path)
    assert str(e.value).startswith(
        f"{path}:3: min_runtime: '99:99': the seconds, 99, must be under 60")


def test_a_json_lines_key_in_another_case_is_read_as_that_column(tmp_path: Path) -> None:
    """A JSON Lines row spelling a key ``GPUS`` where the others say ``gpus`` is read as the
    ``gpus`` column, as a CSV header in another case is (it read as "gpus: missing
    value"); an object naming a key twice in different cases is refused at its line."""
    path = write(tmp_path, "t.jsonl",
                 '{"submit_time": 0, "gpus": 1, "duration": 60, "budget": "a"}\n'
                 '{"submit_time": 1, "GPUS": 2, "Duration": "2m", "budget": "a"}\n')
    assert [(j.spec.gpus, j.duration) for j in load_trace(path).jobs] == [(1, 60.0),
                                                                          (2, 120.0)]
    path.write_text(path.read_text() + '{"submit_time": 2, "gpus": 1, "GPUS": 2, '
                    '"duration": 60, "budget": "a"}\n')
    with pytest.raises(TraceError) as e:
        load_trace(path)
    assert str(e.value) == f"{path}:3: row: key 'gpus' appears twice, as 'gpus' and 'GPUS'"


def test_plain_trace_has_exactly_the_canonical_columns(tmp_path: Path) -> None:
    """A trace of imported jobs writes the eleven canonical columns, in order."""
    trace = load_trace(CLUSTER10, format="itp", budgets=2)
    path = write_canonical(trace.jobs, tmp_path / "t.csv")
    assert path.read_text().splitlines()[0] == (
        "id,submit_time,budget,user,gpus,duration,min_runtime,resumable,priority,"
        "preemptible,checkpoint_interval"
    )


def test_iso_submit_times_become_seconds_after_the_first_submission() -> None:
    """ISO 8601 times (with Z, an offset, or no zone = UTC) are seconds since the earliest."""
    trace = load_trace(DATA / "canonical_iso.jsonl")
    jobs = by_id(trace.jobs)
    assert jobs["a"].spec.submit_time == 0.0
    assert jobs["b"].spec.submit_time == 1800.0  # 10:30+01:00 is 09:30Z
    assert jobs["c"].spec.submit_time == 2730.0
    assert trace.time_origin == 1709283600.0  # 2024-03-01T09:00:00Z


def test_canonical_fields_and_suffixed_durations() -> None:
    """Given fields are used as given; "2h", "30m", "1h30m" are seconds."""
    jobs = by_id(load_trace(DATA / "canonical_iso.jsonl").jobs)
    a, c = jobs["a"], jobs["c"]
    assert (a.duration, a.spec.min_runtime, a.spec.checkpoint_interval) == (7200, 1800, 900)
    assert a.spec.resumable and not a.legacy_preemptible
    assert a.spec.priority == 2 and a.legacy_priority is LegacyPriority.URGENT
    assert c.duration == 5400 and c.spec.min_runtime == 0  # unallocated by choice
    assert c.spec.priority == 1 and c.legacy_priority is LegacyPriority.HIGH  # "high"


def test_budgets_from_the_trace_build_the_tree_with_equal_weights() -> None:
    """The distinct budget paths become the leaves, weight 1 each."""
    tree = load_trace(DATA / "canonical_iso.jsonl").tree
    assert tree.leaves == ("ai/llm", "ai/vision")
    assert tree.share("ai/llm") == tree.share("ai/vision") == 0.5


def test_mixing_seconds_and_iso_times_is_an_error(tmp_path: Path) -> None:
    """One file uses one form of submit time."""
    path = write(tmp_path, "t.csv",
                 "submit_time,gpus,duration\n10,1,60\n2024-03-01T00:00:00,1,60\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value) == (
        f"{path}:3: submit_time: an ISO 8601 time, but line 2 gives seconds; "
        "use one form for the whole file"
    )


# ---- sacct -------------------------------------------------------------------------------
def test_sacct_keeps_jobs_that_ran_on_gpus() -> None:
    """Steps, never-started jobs (PENDING, cancelled before start) and CPU jobs are skipped."""
    trace = load_trace(SACCT, format="sacct")
    assert [j.spec.id for j in trace.jobs] == [
        "1001", "1002", "1005", "1007", "1008", "1009", "1010_1"
    ]
    assert trace.skipped == {
        "job step": 7,
        "never started (PENDING)": 2,
        "never started (CANCELLED)": 1,
        "no GPUs": 1,
    }
    assert trace.rows == 18


def test_sacct_durations_gpus_and_times() -> None:
    """Elapsed in D-HH:MM:SS, HH:MM:SS and MM:SS; gres/gpu (or typed gres) for GPUs; Submit
    relative to the first job."""
    jobs = by_id(load_trace(SACCT, format="sacct").jobs)
    assert jobs["1002"].duration == 2 * 86400 + 2 * HOUR and jobs["1002"].spec.gpus == 32
    assert jobs["1009"].duration == 45 and jobs["1009"].spec.gpus == 1
    assert jobs["1005"].duration == 720 and jobs["1005"].spec.gpus == 2  # cancelled after start
    assert jobs["1008"].spec.gpus == 8  # only gres/gpu:h100=8
    assert jobs["1001"].spec.submit_time == 0 and jobs["1002"].spec.submit_time == 1800


def test_sacct_running_job_counts_with_elapsed_time_and_a_warning() -> None:
    """A RUNNING job's duration is the time elapsed so far; the import says so."""
    trace = load_trace(SACCT, format="sacct")
    assert by_id(trace.jobs)["1007"].duration == 5.5 * HOUR
    assert f"{SACCT}: 1 row: still running: duration is the time elapsed so far " \
        "(first at line 13)" in trace.warnings
    assert f"{SACCT}: skipped 2 rows: never started (PENDING) (first at line 8)" in trace.warnings


def test_sacct_start_and_end_without_a_zone_name_the_dst_problem_and_elapsed(
    tmp_path: Path,
) -> None:
    """Without Elapsed, a job that ended in the hour a US fall-back repeats (01:45 PDT to
    01:15 PST, 2026-11-01) is refused naming its line and End, saying that Start and End
    have no zone and that Elapsed gives exact durations (it said only 'before Start'); one
    across the change (00:30 to 03:30, 4 h run, read as 3 h) loads with a warning saying
    the same; one that crosses none loads without it; with Elapsed both load, no warning."""
    head = "JobID|User|Account|Submit|Start|End|AllocTRES|NodeList|State\n"
    across = ("101|alice|llm|2026-11-01T00:20:00|2026-11-01T00:30:00|2026-11-01T03:30:00|"
              "gres/gpu=8|gpu1|COMPLETED\n")
    repeated = ("102|bob|vis|2026-11-01T01:40:00|2026-11-01T01:45:00|2026-11-01T01:15:00|"
                "gres/gpu=2|gpu2|COMPLETED\n")
    plain = ("103|bob|vis|2026-11-10T01:40:00|2026-11-10T01:45:00|2026-11-10T02:15:00|"
             "gres/gpu=2|gpu2|COMPLETED\n")
    path = tmp_path / "jobs.txt"
    path.write_text(head + across + repeated)
    with pytest.raises(TraceError) as e:
        load_trace(path, format="sacct")
    assert str(e.value) == (
        f"{path}:3: End: before Start (2026-11-01T01:15:00 < 2026-11-01T01:45:00): Start and "
        "End have no zone (sacct prints the cluster's local time), so End - Start is wrong "
        "across a daylight-saving change, and a job that ended in the hour a fall-back "
        "repeats reads as ending before it started; export Elapsed too (sacct --format "
        "...,Elapsed), which gives exact durations")
    path.write_text(head + plain + across)
    trace = load_trace(path, format="sacct")
    assert trace.warnings == (
        f"{path}: 1 row: duration is End - Start of times without a zone, across a "
        "daylight-saving change (US, European or Australian dates): an hour off if the "
        "cluster's zone changed then; an Elapsed column gives exact durations (first at "
        "line 3)",)
    with_elapsed = tmp_path / "elapsed.txt"
    with_elapsed.write_text(
        "JobID|Account|Submit|Start|End|Elapsed|AllocTRES|State\n"
        "101|llm|2026-11-01T00:20:00|2026-11-01T00:30:00|2026-11-01T03:30:00|04:00:00|"
        "gres/gpu=8|COMPLETED\n"
        "102|vis|2026-11-01T01:40:00|2026-11-01T01:45:00|2026-11-01T01:15:00|00:30:00|"
        "gres/gpu=2|COMPLETED\n")
    trace = load_trace(with_elapsed, format="sacct")
    assert [j.duration for j in trace.jobs] == [4 * HOUR, 0.5 * HOUR]
    assert trace.warnings == ()


def test_sacct_job_without_an_account_draws_on_account_none_beside_the_accounts() -> None:
    """Account gives the budget; frank's job, with an empty Account, draws on account/_none,
    a third of the cluster like each of the two accounts, not a top-level user/frank owed
    as much as llm and vision together."""
    trace = load_trace(SACCT, format="sacct")
    jobs = by_id(trace.jobs)
    assert jobs["1001"].spec.budget == "account/llm" and jobs["1001"].spec.user == "alice"
    assert jobs["1008"].spec.budget == "account/_none" and jobs["1008"].spec.user == "frank"
    assert trace.tree.leaves == ("account/_none", "account/llm", "account/vision")
    assert trace.tree.share("account/_none") == pytest.approx(1 / 3)


def test_sacct_without_any_account_has_a_budget_per_user(tmp_path: Path) -> None:
    """A dump in which no job names an account (every Account empty) gives one budget per
    user, user/<User>."""
    lines = SACCT.read_text().splitlines()
    no_account = ["|".join("" if i == 2 and n else c for i, c in enumerate(line.split("|")))
                  for n, line in enumerate(lines)]
    trace = load_trace(write(tmp_path, "s.txt", "\n".join(no_account)), format="sacct")
    assert by_id(trace.jobs)["1001"].spec.budget == "user/alice"
    assert trace.tree.leaves == ("user/alice", "user/bob", "user/carol", "user/dave",
                                 "user/frank")


def test_sacct_nested_budgets_from_account_and_user() -> None:
    """budget_column=(account, user) nests users under accounts, like Slurm associations."""
    trace = load_trace(SACCT, format="sacct", budget_column=("account", "user"))
    assert by_id(trace.jobs)["1005"].spec.budget == "account/vision/dave"
    assert "account/_none/frank" in trace.tree.leaves


def test_sacct_bad_elapsed_names_line_and_column(tmp_path: Path) -> None:
    """An unreadable Elapsed fails the import at its line."""
    text = SACCT.read_text().replace("|00:45|", "|forty|")
    path = write(tmp_path, "s.txt", text)
    with pytest.raises(TraceError,
                       match=rf"^{path}:16: Elapsed: must be a duration like .*, got 'forty'$"):
        load_trace(path, format="sacct")


def test_sacct_byte_that_is_not_utf8_is_reported_at_its_own_line(tmp_path: Path) -> None:
    """A Latin-1 'é' in the User of line 2 of an sacct export is reported at line 2 and its
    column, not as the whole file being unreadable."""
    path = tmp_path / "s.txt"
    path.write_bytes(SACCT.read_bytes().replace(b"|alice|", b"|alic\xe9|", 1))
    with pytest.raises(TraceError) as e:
        load_trace(path, format="sacct")
    assert str(e.value) == (f"{path}:2: row: not UTF-8 text: byte 0xe9 at column 10 "
                            "(save the file as UTF-8)")


def test_parse_tres() -> None:
    """gres/gpu wins over typed counts; typed counts add up; no GPU entry is 0."""
    assert parse_tres("cpu=4,gres/gpu=2,gres/gpu:a100=2") == 2
    assert parse_tres("gres/gpu:a100=2,gres/gpu:h100=4") == 6
    assert parse_tres("billing=4,cpu=4,mem=16G,node=1") == 0


# ---- mapped CSV --------------------------------------------------------------------------
def test_csv_with_map_options_and_budget_per_column_value() -> None:
    """--map canonical=column reads any CSV; budget_column makes one budget per value."""
    mapping = parse_mapping([
        "id=job_name", "user=owner", "submit_time=queued_at", "gpus=gpu_num", "duration=runtime"
    ])
    trace = load_trace(DATA / "helios_like.csv", format="csv", mapping=mapping,
                       budget_column="vc")
    jobs = by_id(trace.jobs)
    assert set(jobs) == {"j-0001", "j-0002", "j-0004", "j-0005"}
    assert trace.skipped == {"no GPUs": 1}
    assert jobs["j-0004"].duration == 36 * HOUR and jobs["j-0004"].spec.user == "alice"
    assert trace.tree.leaves == ("vc/vc-infra", "vc/vc-llm", "vc/vc-vision")


def test_bad_map_option() -> None:
    """A --map item without '=' is refused, naming the option."""
    with pytest.raises(TraceError, match="^--map: expected canonical=column, got 'gpus'$"):
        parse_mapping(["gpus"])


def test_a_field_mapped_twice_is_refused_naming_both_mappings() -> None:
    """--map submit_time=queued_at --map submit_time=runtime is refused, naming the option and
    both mappings (the last one used to win silently)."""
    with pytest.raises(TraceError) as e:
        parse_mapping(["submit_time=queued_at", "gpus=gpu_num", " submit_time = runtime"])
    assert str(e.value) == ("--map: submit_time is mapped twice: submit_time=queued_at and "
                            "submit_time=runtime")


def test_one_column_is_read_as_two_fields_only_if_they_hold_the_same_kind() -> None:
    """submit_time and duration both mapped to queued_at (in another case) is refused as a
    mapping error naming both fields and the column; duration and min_runtime both mapped to
    runtime is allowed: every job then declares its whole run (capped at 8 h)."""
    path = DATA / "helios_like.csv"
    with pytest.raises(TraceError) as e:
        load_trace(path, format="csv", budget_column="vc", mapping={
            "submit_time": "queued_at", "gpus": "gpu_num", "duration": "Queued_At"})
    assert str(e.value) == ("mapping: submit_time (a time) and duration (a duration) both "
                            "read column 'queued_at'")
    trace = load_trace(path, format="csv", budget_column="vc", mapping={
        "submit_time": "queued_at", "gpus": "gpu_num", "duration": "runtime",
        "min_runtime": "runtime"})
    assert all(j.spec.min_runtime == min(j.duration, 8 * HOUR) for j in trace.jobs)


def test_map_to_a_missing_column(tmp_path: Path) -> None:
    """A mapped column the file lacks is named with the file."""
    path = DATA / "helios_like.csv"
    with pytest.raises(TraceError, match=rf"^{path}: num_gpu: column not found \(mapped to gpus"):
        load_trace(path, format="csv", mapping={"gpus": "num_gpu"})


# ---- budget synthesis --------------------------------------------------------------------
def test_n_budgets_tree_and_assignment(big_itp: Path) -> None:
    """budgets=N gives N equal leaves trace/b00.. and spreads jobs over all of them."""
    trace = load_trace(big_itp, format="itp", budgets=12)
    assert trace.tree.leaves == tuple(f"trace/b{i:02d}" for i in range(12))
    assert all(trace.tree.share(leaf) == pytest.approx(1 / 12) for leaf in trace.tree.leaves)
    counts = Counter(j.spec.budget for j in trace.jobs)
    assert set(counts) == set(trace.tree.leaves)
    assert max(counts.values()) < 1.3 * min(counts.values())


def test_budget_assignment_is_stable() -> None:
    """Same input, same budgets, in this process and any other (hashlib, not hash())."""
    a = load_trace(CLUSTER10, format="itp", budgets=5)
    b = load_trace(CLUSTER10, format="itp", budgets=5)
    assert [j.spec.budget for j in a.jobs] == [j.spec.budget for j in b.jobs]
    # fixed values: a salted hash would not reproduce them across processes
    assert [stable_bucket(k, 10) for k in ("alice", "bob", "job-1")] == [5, 2, 5]


def test_budgets_hash_by_user_so_a_user_stays_in_one_budget() -> None:
    """With a user column, all of one user's jobs share a budget."""
    trace = load_trace(SACCT, format="sacct", budgets=3)
    per_user = {(j.spec.user, j.spec.budget) for j in trace.jobs}
    assert len(per_user) == len({j.spec.user for j in trace.jobs})


def test_weights_and_named_leaves() -> None:
    """budgets may name the leaves; weights set their shares."""
    trace = load_trace(CLUSTER10, format="itp", budgets=["ai/llm", "ai/vision", "infra"],
                       weights={"ai": 3.0, "infra": 1.0})
    assert trace.tree.share("ai/llm") == pytest.approx(0.375)
    assert trace.tree.share("infra") == pytest.approx(0.25)


def test_given_tree_receives_the_jobs() -> None:
    """A given tree is used as is; jobs are hashed onto its leaves."""
    tree = BudgetTree.build([BudgetNode("p/a", 2.0), BudgetNode("p/b", 1.0), BudgetNode("q", 1)])
    trace = load_trace(CLUSTER10, format="itp", tree=tree)
    assert trace.tree is tree
    assert {j.spec.budget for j in trace.jobs} == {"p/a", "p/b", "q"}


def test_trace_budget_not_in_given_tree(tmp_path: Path) -> None:
    """A trace budget that is not a leaf of the given tree is named with its line."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration,budget\n0,1,60,x\n")
    tree = BudgetTree.build([BudgetNode("y")])
    with pytest.raises(TraceError) as e:
        load_trace(path, tree=tree)
    assert str(e.value) == f"{path}:2: budget: 'x' is not a leaf of the given budget tree"


def test_budget_that_is_also_a_parent(tmp_path: Path) -> None:
    """Jobs draw on leaves: a budget that is the parent of another is refused at its line."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration,budget\n0,1,60,ai/llm\n1,1,60,ai\n")
    with pytest.raises(TraceError, match=rf"^{path}:3: budget: 'ai' is also the parent"):
        load_trace(path)


# ---- default rules -----------------------------------------------------------------------
def test_min_runtime_rule() -> None:
    """Debug jobs are protected for their whole (short) run; others for a quarter of it,
    at least 30 min, at most the run and the cap."""
    assert default_min_runtime(8, 600) == 600  # debug
    assert default_min_runtime(16, 600) == 600  # short but large: its whole run
    assert default_min_runtime(1, 1200) == 1200  # 20 min: floor of 30 min, capped by the run
    assert default_min_runtime(1, 1.5 * HOUR) == 1800  # floor
    assert default_min_runtime(64, 10 * HOUR) == 2.5 * HOUR  # a quarter
    assert default_min_runtime(64, 100 * HOUR) == 8 * HOUR  # cap
    assert default_min_runtime(64, 100 * HOUR, max_min_runtime=2 * HOUR) == 2 * HOUR


def test_rule_keeps_debug_jobs_debug_and_others_not() -> None:
    """Imported jobs are debug workloads exactly when small and short."""
    config = PolicyConfig()
    for job in load_trace(CLUSTER10, format="itp", budgets=2).jobs:
        small_short = job.spec.gpus <= 8 and job.duration <= 900
        assert is_debug(job.spec, config) == small_short
        assert 0 < job.spec.min_runtime <= config.max_min_runtime


def test_unallocated_fraction_is_stable_and_about_right(big_itp: Path) -> None:
    """Asked for 30% unallocated: about 30% of jobs get min_runtime 0, the same ones each time,
    other ones with another seed."""
    def unallocated(seed: int) -> set[str]:
        trace = load_trace(big_itp, format="itp", budgets=2,
                           unallocated_fraction=0.3, seed=seed)
        return {j.spec.id for j in trace.jobs if j.spec.min_runtime == 0}

    first = unallocated(0)
    assert 0.27 < len(first) / 6000 < 0.33
    assert unallocated(0) == first
    assert unallocated(1) != first


def test_no_unallocated_jobs_unless_asked() -> None:
    """By default every imported job is allocated."""
    assert all(j.spec.min_runtime > 0
               for j in load_trace(CLUSTER10, format="itp", budgets=2).jobs)


def test_given_min_runtime_above_the_cap_is_lowered_and_counted(tmp_path: Path) -> None:
    """An explicit min_runtime over max_min_runtime becomes the cap, with a warning, and
    the job is named in min_runtime_lowered (which the run counts in clamped_min_runtime)."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration,min_runtime,budget\n"
                 "0,8,20h,10h,a\n0,8,20h,1h,a\n")
    trace = load_trace(path, max_min_runtime=4 * HOUR)
    assert [j.spec.min_runtime for j in trace.jobs] == [4 * HOUR, HOUR]
    assert trace.min_runtime_lowered == ("line2",)
    assert trace.warnings == (
        f"{path}: 1 row: min_runtime above max_min_runtime (4 h): lowered to it "
        "(first at line 2)",
    )


def test_resumable_and_checkpoint_defaults(tmp_path: Path) -> None:
    """Longer than 1 h: resumable with 30 min checkpoints; shorter: not, no interval."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration,budget\n0,1,1h,a\n0,1,61m,a\n")
    short, long = load_trace(path).jobs
    assert (short.spec.resumable, short.spec.checkpoint_interval) == (False, 0.0)
    assert (long.spec.resumable, long.spec.checkpoint_interval) == (True, 1800.0)


def test_parse_duration_forms() -> None:
    """Seconds, suffixed forms and clock forms (the package's one parser, re-exported)."""
    assert parse_duration("15s") == 15 and parse_duration("30m") == 1800
    assert parse_duration("2h") == 7200 and parse_duration("1h30m") == 5400
    assert parse_duration("1.5h") == 5400 and parse_duration("1d") == 86400
    assert parse_duration("1-02:00:00") == 93600 and parse_duration("05:30") == 330
    assert parse_duration("90") == 90 and parse_duration(2.5) == 2.5
    assert parse_duration("5min") == 300


def test_suffixed_and_clock_durations_in_cells(tmp_path: Path) -> None:
    """Cells read every form of the shared parser: 1h30m, 5min, 1-02:00:00, 05:30."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration,min_runtime,budget\n"
                 "0,1,1h30m,5min,a\n1,1,1-02:00:00,05:30,a\n")
    a, b = load_trace(path).jobs
    assert (a.duration, a.spec.min_runtime) == (5400, 300)
    assert (b.duration, b.spec.min_runtime) == (93600, 330)


# ---- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0,-1,60", "gpus: must be >= 0, got -1"),
        ("0,1.5,60", "gpus: not a whole number: 1.5"),
        ("0,1,soon", "duration: must be a duration like 30m, 8h, 7d, 1h30m, HH:MM:SS or a "
                     "number of seconds, got 'soon'"),
        ("0,1,-5", "duration: must be a finite duration >= 0, got '-5'"),
        ("yesterday,1,60", "submit_time: not seconds or an ISO 8601 time: 'yesterday'"),
        ("2024-13-01T00:00:00,1,60",
         "submit_time: not seconds or an ISO 8601 time: '2024-13-01T00:00:00'"),
        (",1,60", "submit_time: missing value (required)"),
        ("0,1", "row: expected 3 fields, got 2"),
    ],
)
def test_bad_row_message(tmp_path: Path, row: str, message: str) -> None:
    """A bad row fails the whole import with file:line: field: problem."""
    path = write(tmp_path, "t.csv", f"submit_time,gpus,duration\n0,1,60\n\n{row}\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=2)
    assert str(e.value) == f"{path}:4: {message}"


def test_bad_row_in_jsonl_names_its_line(tmp_path: Path) -> None:
    """JSON Lines errors give the record's line."""
    path = write(tmp_path, "t.jsonl",
                 '{"submit_time": 0, "gpus": 1, "duration": 60}\n'
                 '{"submit_time": 0, "gpus": "two", "duration": 60}\n')
    with pytest.raises(TraceError, match=rf"^{path}:2: gpus: not a whole number: 'two'$"):
        load_trace(path, budgets=1)


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz", "t.jsonl"])
@pytest.mark.parametrize("rows, bad_line", [(3, 2), (3000, 2501)])
def test_a_byte_that_is_not_utf8_is_reported_at_its_own_line(
    tmp_path: Path, name: str, rows: int, bad_line: int
) -> None:
    """A Latin-1 'é' (byte 0xe9) in a UTF-8 trace is reported at its own line and column,
    both in line 2 of a small file and at line 2501, far past the first 8 KB the text reader
    decodes at once: CSV, gzipped CSV and JSON Lines."""
    if name.endswith(".jsonl"):
        lines = [b'{"id": "j%d", "submit_time": %d, "gpus": 1, "duration": 600}\n' % (i, i)
                 for i in range(rows)]
        lines[bad_line - 1] = b'{"id": "caf\xe9", "submit_time": 0, "gpus": 1, "duration": 600}\n'
        column = 12
    else:
        lines = [b"id,submit_time,gpus,duration\n"]
        lines += [b"j%d,%d,1,600\n" % (i, i) for i in range(rows)]
        lines[bad_line - 1] = b"caf\xe9,0,1,600\n"
        column = 4
    data = b"".join(lines)
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value) == (f"{path}:{bad_line}: row: not UTF-8 text: byte 0xe9 at column "
                            f"{column} (save the file as UTF-8)")


def test_parquet_binary_text_is_decoded_and_lists_are_no_names(tmp_path: Path) -> None:
    """A Parquet string column stored as binary (no UTF-8 annotation) gives the decoded text
    as the budget (``ai/llm``, not ``b'ai/llm'``); a binary cell that is not UTF-8 is refused
    at its line and column; a JSON list or object where a name belongs (``id``, ``budget``)
    is refused at its line, shown as the file writes it, instead of its Python form becoming
    the name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": pa.array([b"a", b"b"], pa.binary()),
                             "submit_time": [0, 5],
                             "budget": pa.array([b"ai/llm", b"ai/vision"], pa.binary()),
                             "gpus": [1, 2], "duration": [3600, 60]}), path)
    trace = load_trace(path)
    assert [(j.spec.id, j.spec.budget) for j in trace.jobs] == [("a", "ai/llm"),
                                                                ("b", "ai/vision")]
    pq.write_table(pa.table({"submit_time": [0, 5],
                             "budget": pa.array([b"ai/llm", b"ai/\xff"], pa.binary()),
                             "gpus": [1, 2], "duration": [3600, 60]}), path)
    with pytest.raises(TraceError) as e:
        load_trace(path)
    assert str(e.value) == f"{path}:3: budget: not UTF-8 text: byte 0xff at byte 4 of the value"
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"id": "a", "submit_time": 0, "budget": "ai/llm", "gpus": 1, '
                     '"duration": 60}\n{"id": ["b"], "submit_time": 0, "budget": "ai/llm", '
                     '"gpus": 1, "duration": 60}\n')
    with pytest.raises(TraceError) as e:
        load_trace(jsonl)
    assert str(e.value) == f'{jsonl}:2: id: expected text, got a list: ["b"]'
    jsonl.write_text('{"submit_time": 0, "budget": {"ai": "llm"}, "gpus": 1, "duration": 60}\n')
    with pytest.raises(TraceError) as e:
        load_trace(jsonl)
    assert str(e.value) == f'{jsonl}:1: budget: expected text, got an object: {{"ai": "llm"}}'


@pytest.mark.parametrize(("cells", "expected"), [
    ('"gpus": true, "duration": 60', "gpus: not a whole number: true"),
    ('"gpus": [2], "duration": 60', "gpus: not a whole number: [2]"),
    ('"gpus": 1, "duration": false', "duration: must be a duration like 30m, 8h, 7d, 1h30m, "
     "HH:MM:SS or a number of seconds, got false"),
    ('"gpus": 1, "duration": 60, "resumable": null, "preemptible": ["y"]',
     'preemptible: not a boolean: ["y"] (use true/false, yes/no or 1/0)'),
    ('"gpus": 1, "duration": 60, "priority": {"level": "high"}',
     'priority: not a priority: {"level": "high"} (use a whole number or '
     "low/normal/high/urgent)"),
    ('"gpus": "eight", "duration": 60', "gpus: not a whole number: 'eight'"),
])
def test_a_bad_json_value_is_named_as_the_file_writes_it(
        tmp_path: Path, cells: str, expected: str) -> None:
    """A JSON Lines value of the wrong type is named in the error as JSON writes it (``true``,
    ``[2]``, ``{"level": "high"}``), not as Python does (``True``, ``[2]``, ``{'level':
    'high'}``); a string stays quoted."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"submit_time": 0, "budget": "ai/llm", ' + cells + "}\n")
    with pytest.raises(TraceError) as e:
        load_trace(path)
    assert str(e.value) == f"{path}:1: {expected}"


def test_parquet_decimal_columns_are_read_as_numbers(tmp_path: Path) -> None:
    """Parquet decimal128 columns: gpus 1.0 and 2.0 are 1 and 2 GPUs, decimal submit times and
    durations are seconds, a decimal priority 1.0 is 1; gpus 1.5 is still refused at its line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def dec(*values: str) -> pa.Array:
        return pa.array([Decimal(v) for v in values], pa.decimal128(10, 1))

    columns = {"id": pa.array(["a", "b"]), "submit_time": dec("0.0", "60.5"),
               "gpus": dec("1.0", "2.0"), "duration": dec("3600.0", "1800.5"),
               "priority": dec("0.0", "1.0")}
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(columns), path)
    jobs = by_id(load_trace(path, budgets=1).jobs)
    assert (jobs["a"].spec.gpus, jobs["b"].spec.gpus) == (1, 2)
    assert jobs["b"].spec.submit_time == 60.5 and jobs["b"].duration == 1800.5
    assert jobs["b"].spec.priority == 1 and jobs["b"].legacy_priority is LegacyPriority.HIGH
    pq.write_table(pa.table({**columns, "gpus": dec("1.0", "1.5")}), path)
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value) == f"{path}:3: gpus: not a whole number: 1.5"


def test_bad_row_in_mapped_csv_names_the_file_column(tmp_path: Path) -> None:
    """With a mapping, the message names the file's column, not the canonical name."""
    path = write(tmp_path, "t.csv", "job_id,submission_time,duration,num_gpu\nx,0,60,-2\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, format="itp", budgets=1)
    assert str(e.value) == f"{path}:2: num_gpu: must be >= 0, got -2"


def test_duplicate_id(tmp_path: Path) -> None:
    """Ids are unique within a trace."""
    path = write(tmp_path, "t.csv", "id,submit_time,gpus,duration\nx,0,1,60\nx,1,1,60\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value) == f"{path}:3: id: duplicate id 'x' (first at line 2)"


def test_missing_required_column(tmp_path: Path) -> None:
    """The message names the missing column and the file."""
    path = write(tmp_path, "t.csv", "submit_time,gpus\n0,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value) == f"{path}: duration: required column missing (columns: submit_time, gpus)"


@pytest.mark.parametrize(("first", "why"), [
    ("sep=,", "the first line is Excel's 'sep=' line, not the header: remove it"),
    ("# exported from sacct", "the first line is a comment, not the header: the header "
                              "must come first"),
])
def test_a_line_before_the_header_is_named_for_what_it_is(
        tmp_path: Path, first: str, why: str) -> None:
    """A CSV whose first line is Excel's ``sep=,`` or a ``#`` comment, the header after
    it: the missing column's error says what that first line is (it listed it as the
    columns, ``columns: sep=, ``, and said no more)."""
    path = write(tmp_path, "t.csv", f"{first}\nsubmit_time,gpus,duration\n0,1,60\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value).startswith(f"{path}: submit_time: required column missing"), e.value
    assert str(e.value).endswith(f"; {why}"), e.value


@pytest.mark.parametrize(
    "header, message",
    [
        ("id,submit_time,gpus,duration,duration",
         "column 'duration' appears twice (columns 4 and 5)"),
        ("id,submit_time,gpus,Duration, duration ",
         "column 'Duration' appears twice (columns 4 and 5, as 'Duration' and 'duration')"),
    ],
)
def test_a_column_named_twice_is_refused(tmp_path: Path, header: str, message: str) -> None:
    """A CSV header naming a column twice, exactly or with another case and spaces around
    it, fails at line 1 naming both columns (the last one used to win silently)."""
    path = write(tmp_path, "t.csv", f"{header}\na,0,1,3600,5\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value) == f"{path}:1: header: {message}"


def test_a_parquet_column_named_twice_in_two_cases_is_refused(tmp_path: Path) -> None:
    """A Parquet file with columns 'duration' and 'Duration' fails naming both (Parquet has
    no lines, so no line either)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"submit_time": [0], "gpus": [1], "duration": [3600],
                             "Duration": [5]}), path)
    with pytest.raises(TraceError) as e:
        load_trace(path, budgets=1)
    assert str(e.value) == (f"{path}: header: column 'duration' appears twice "
                            "(columns 3 and 4, as 'duration' and 'Duration')")


def test_an_sacct_column_named_twice_is_refused(tmp_path: Path) -> None:
    """An sacct header with State twice fails at line 1 naming both columns."""
    path = write(tmp_path, "s.txt", SACCT.read_text().replace("|State\n", "|state\n", 1)
                 .replace("|ReqTRES|", "|State|", 1))
    with pytest.raises(TraceError) as e:
        load_trace(path, format="sacct")
    assert str(e.value) == (f"{path}:1: header: column 'State' appears twice "
                            "(columns 9 and 10, as 'State' and 'state')")


def test_unknown_format() -> None:
    """Unknown formats are refused, listing the known ones."""
    with pytest.raises(TraceError) as e:
        load_trace(CLUSTER10, format="philly")
    assert str(e.value) == "format: unknown format 'philly' (known: canonical, itp, sacct, csv)"


def test_trace_error_is_a_value_error() -> None:
    """Callers may catch ValueError."""
    assert issubclass(TraceError, ValueError)


def test_zero_gpu_and_zero_duration_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    """CPU-only and zero-length rows are not jobs; they are counted, not errors."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration\n0,0,60\n0,1,0\n0,1,60\n")
    trace = load_trace(path, budgets=1)
    assert len(trace.jobs) == 1
    assert trace.skipped == {"no GPUs": 1, "duration is 0": 1}


def test_a_trace_without_jobs_is_an_error(tmp_path: Path) -> None:
    """All rows skipped means there is nothing to simulate."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration\n0,0,60\n")
    with pytest.raises(TraceError, match=rf"^{path}: no jobs in the trace; skipped 1 row: no GPUs"):
        load_trace(path, budgets=1)


def test_sacct_parsable_with_trailing_pipes(tmp_path: Path) -> None:
    """Plain --parsable output (every line ends with '|') reads like --parsable2."""
    text = "".join(line + "|\n" for line in SACCT.read_text().splitlines())
    path = write(tmp_path, "s.txt", text)
    assert load_trace(path, format="sacct").jobs == load_trace(SACCT, format="sacct").jobs


def test_budget_column_missing_from_the_file(tmp_path: Path) -> None:
    """budget_column must name a column of the file."""
    path = write(tmp_path, "t.csv", "submit_time,gpus,duration\n0,1,60\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, budget_column="team")
    assert str(e.value) == f"{path}: team: column not found (columns: submit_time, gpus, duration)"


def test_sacct_missing_required_column(tmp_path: Path) -> None:
    """sacct output without Submit is refused, naming the column and the file."""
    path = write(tmp_path, "s.txt", "JobID|State|AllocTRES|Elapsed\n1|COMPLETED|gres/gpu=1|01:00\n")
    with pytest.raises(TraceError) as e:
        load_trace(path, format="sacct")
    assert str(e.value) == (
        f"{path}: Submit: required column missing (columns: JobID, State, AllocTRES, Elapsed)"
    )


# ---- the cluster a sacct trace ran on ----------------------------------------------------
SACCT_NODES = DATA / "sacct_nodes.txt"


def test_sacct_nodelist_gives_the_hosts_and_their_peak_gpus() -> None:
    """With a NodeList column the trace's hosts are the ones GPU jobs ran on, each with the
    most GPUs in use on it at once: gpu01/gpu02 from one 16-GPU job over two hosts, gpu03
    from two overlapping 4-GPU jobs, gpu04 from an 8-GPU job (the 2-GPU job after it does
    not add). The CPU-only host and the pending job's 'None assigned' are not hosts."""
    trace = load_trace(SACCT_NODES, format="sacct")
    assert [(h.name, h.gpus) for h in trace.hosts] == [
        ("gpu01", 8), ("gpu02", 8), ("gpu03", 8), ("gpu04", 8)]


def test_sacct_without_nodelist_names_no_hosts() -> None:
    """A sacct trace without NodeList (and any other format) says nothing about its hosts."""
    assert load_trace(SACCT, format="sacct").hosts == ()
    assert load_trace(CLUSTER10, format="itp", budgets=2).hosts == ()


def test_sacct_bad_nodelist_names_line_and_column(tmp_path: Path) -> None:
    """An unreadable NodeList fails the import at its line."""
    path = write(tmp_path, "s.txt", SACCT_NODES.read_text().replace("|gpu03|", "|gpu[03|", 1))
    with pytest.raises(TraceError, match=rf"^{path}:4: NodeList: not a Slurm host list: 'gpu\[03'"):
        load_trace(path, format="sacct")


# ---- sacct --duplicates: the runs of a requeued job ---------------------------------------
SACCT_DUP = """\
JobID|User|Account|Submit|Start|End|Elapsed|AllocTRES|NodeList|State
13|alice|llm|2026-12-06T22:06:30|2026-12-06T22:06:38|2026-12-06T22:06:45|00:00:07|gres/gpu=8|gpu2|REQUEUED
13.batch|||2026-12-06T22:06:38|2026-12-06T22:06:38|2026-12-06T22:06:45|00:00:07|gres/gpu=8|gpu2|CANCELLED
13|alice|llm|2026-12-06T22:06:45|2026-12-06T22:06:46|2026-12-06T22:07:06|00:00:20|gres/gpu=8|gpu2|COMPLETED
14|bob|vision|2026-12-06T22:07:00|2026-12-06T22:07:10|2026-12-06T22:07:13|00:00:03|gres/gpu=4|gpu1|NODE_FAIL
14|bob|vision|2026-12-06T22:07:13|2026-12-06T22:07:14|Unknown|00:00:17|gres/gpu=4|gpu1|RUNNING
"""


def test_sacct_requeued_job_keeps_its_last_run_and_first_submit(tmp_path: Path) -> None:
    """With ``sacct --duplicates`` a requeued job's runs come oldest first: the job keeps the
    duration of its last run (20 s and 17 s, not the cut-off 7 s and 3 s) and the Submit of
    its first, and the warning names the line of the first earlier run dropped (line 2)."""
    path = write(tmp_path, "dup.txt", SACCT_DUP)
    trace = load_trace(path, format="sacct")
    jobs = by_id(trace.jobs)
    assert (jobs["13"].duration, jobs["14"].duration) == (20.0, 17.0)
    assert (jobs["13"].spec.submit_time, jobs["14"].spec.submit_time) == (0.0, 30.0)
    assert trace.skipped["earlier run of a requeued job (the job's last run is kept)"] == 2
    assert (f"{path}: skipped 2 rows: earlier run of a requeued job (the job's last run is "
            "kept) (first at line 2)") in trace.warnings


def test_sacct_heterogeneous_job_is_one_gang_with_its_gpus_summed(tmp_path: Path) -> None:
    """The components 9+0 (1 GPU, 600 s) and 9+1 (2 GPUs, 599 s) of a heterogeneous job are
    one workload 9 of 3 GPUs for 600 s, on both components' hosts; the second component is
    counted as a skipped row with a warning at its line (4); the step 9+0.batch stays a
    step."""
    path = write(tmp_path, "het.txt", """\
JobID|User|Account|Submit|Start|End|Elapsed|AllocTRES|NodeList|State
9+0|alice|llm|2026-12-06T22:06:00|2026-12-06T22:06:01|2026-12-06T22:16:01|00:10:00|gres/gpu=1|gpu1|COMPLETED
9+0.batch|||2026-12-06T22:06:01|2026-12-06T22:06:01|2026-12-06T22:16:01|00:10:00|gres/gpu=1|gpu1|COMPLETED
9+1|alice|llm|2026-12-06T22:06:00|2026-12-06T22:06:01|2026-12-06T22:16:00|00:09:59|gres/gpu=2|gpu2|COMPLETED
10|bob|vision|2026-12-06T22:07:00|2026-12-06T22:07:01|2026-12-06T22:17:01|00:10:00|gres/gpu=4|gpu1|COMPLETED
""")
    trace = load_trace(path, format="sacct")
    assert [(j.spec.id, j.spec.gpus, j.duration) for j in trace.jobs] == [
        ("9", 3, 600.0), ("10", 4, 600.0)]
    assert [h.name for h in trace.hosts] == ["gpu1", "gpu2"]
    assert trace.skipped == {"job step": 1, "component of a heterogeneous job (joined to its "
                             "first: one gang, GPUs summed)": 1}
    assert (f"{path}: skipped 1 row: component of a heterogeneous job (joined to its first: "
            "one gang, GPUs summed) (first at line 4)") in trace.warnings


def test_sacct_lines_end_at_line_feeds_only(tmp_path: Path) -> None:
    """A U+2028, a NEL and a form feed in the JobName of line 2 (a job, its row ending in
    CR LF) and a form feed in that of line 3 (its step) are cell text, not line breaks:
    the job is imported and the step counted as a step."""
    path = tmp_path / "u2028.txt"
    path.write_text(
        "JobID|User|Account|Submit|Start|End|Elapsed|AllocTRES|JobName|State\n"
        "1|alice|llm|2026-12-06T22:06:00|2026-12-06T22:06:01|2026-12-06T22:16:01|00:10:00|"
        "gres/gpu=1|a\u2028b\x0cc\x85d|COMPLETED\r\n"
        "1.batch|||2026-12-06T22:06:01|2026-12-06T22:06:01|2026-12-06T22:16:01|00:10:00|"
        "gres/gpu=1|x\x0cy|COMPLETED\n", newline="")
    trace = load_trace(path, format="sacct")
    assert [j.spec.id for j in trace.jobs] == ["1"] and trace.skipped == {"job step": 1}


@pytest.mark.parametrize("name", ["big.txt", "big.txt.gz"])
def test_sacct_is_read_line_by_line_not_held_whole(tmp_path: Path, name: str) -> None:
    """An 8 MB sacct dump (plain and gzipped) of one job and 50,000 step rows, which are
    counted and dropped, is imported with a peak of traced memory under 1 MB: the reader
    holds one line at a time, not the file's text nor a list of its lines (each alone
    more than 8 MB)."""
    import tracemalloc

    step = ("1.{}|batch|||2026-01-01T00:00:05|2026-01-01T00:00:05|2026-01-01T01:00:05|"
            "01:00:00|billing=8,cpu=64,gres/gpu=8,mem=512G,node=1|" + "x" * 40 + "|gpu001|"
            "COMPLETED\n")
    text = ("JobID|JobName|User|Account|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList|"
            "State\n1|train|alice|llm|2026-01-01T00:00:00|2026-01-01T00:00:05|"
            "2026-01-01T01:00:05|01:00:00|gres/gpu=8||gpu001|COMPLETED\n"
            + "".join(step.format(i) for i in range(50_000)))
    assert len(text) > 8_000_000
    path = tmp_path / name
    data = text.encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    del text, data
    tracemalloc.start()
    try:
        trace = load_trace(path, format="sacct")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [j.spec.id for j in trace.jobs] == ["1"] and trace.skipped == {"job step": 50_000}
    assert peak < 1_000_000


@pytest.mark.parametrize("text", [
    '[{"id": "a", "submit_time": 0, "gpus": 8, "duration": 60},\n {"id": "b"}]\n',
    '\n[\n  {"id": "a", "submit_time": 0, "gpus": 8, "duration": 60}\n]\n',
    '[{"id": "a", "submit_time": 0, "gpus": 8, "duration": 60}]\n',
])
def test_a_json_array_file_is_refused_as_not_json_lines(tmp_path: Path, text: str) -> None:
    """A .json file that is one JSON array (Philly's cluster_job_log), on one line or
    pretty-printed, after a blank line or not, is refused at the array's first line saying
    that JSON Lines is expected and the file is a JSON array."""
    path = write(tmp_path, "philly.json", text)
    line = 2 if text.startswith("\n") else 1
    with pytest.raises(TraceError) as e:
        load_trace(path)
    assert str(e.value) == (f"{path}:{line}: row: expects JSON Lines (one object per line); "
                            "this file is a JSON array (convert it: jq -c '.[]' FILE > "
                            "FILE.jsonl)")


@pytest.mark.parametrize(("kind", "values", "origin"), [
    ("date32", ["2024-03-01", "2024-03-02"], "2024-03-01T00:00:00+00:00"),
    ("timestamp", ["2024-03-01T09:00:00", "2024-03-02T09:00:00"], "2024-03-01T09:00:00+00:00"),
    ("timestamp in Europe/Paris", ["2024-03-01T09:00:00+00:00", "2024-03-02T09:00:00+00:00"],
     "2024-03-01T09:00:00+00:00"),
])
def test_parquet_date_and_timestamp_columns_are_read_as_docs_traces_says(
        tmp_path: Path, kind: str, values: list[str], origin: str) -> None:
    """As docs/traces.md ("Times") says: a Parquet ``date32`` submit_time column is midnight
    UTC of its day; a ``timestamp`` without a zone is the time as written, read as UTC (as an
    ISO time without a zone is); one with a zone is the instant it stores, whatever its zone.
    Each is a wall-clock trace: time_origin is its first time, the next a day later."""
    from datetime import UTC, date, datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "date32":
        column = pa.array([date.fromisoformat(v) for v in values], pa.date32())
    elif kind == "timestamp":
        column = pa.array([datetime.fromisoformat(v) for v in values], pa.timestamp("s"))
    else:
        column = pa.array([datetime.fromisoformat(v) for v in values],
                          pa.timestamp("s", tz="Europe/Paris"))
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "submit_time": column, "budget": ["x", "x"],
                             "gpus": [1, 1], "duration": [100, 100]}), path)
    trace = load_trace(path)
    assert datetime.fromtimestamp(trace.time_origin, UTC).isoformat() == origin
    assert trace.wall_clock
    assert [j.spec.submit_time for j in trace.jobs] == [0.0, 86400.0]
