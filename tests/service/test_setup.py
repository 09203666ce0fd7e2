"""Setting up: ``apportion init`` writes a config that loads and serves; ``serve`` with no
budgets starts quietly, says how to add one, and schedules once one exists; the log holds no
migration-tool lines."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from server_proc import free_port

from apportion.cli.main import main
from apportion.service.config import load_config

DEADLINE_S = 60.0  # bounds a hang only


@contextmanager
def serving(config: Path, port: int) -> Iterator[tuple[httpx.Client, Path]]:
    log = config.parent / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "apportion.cli.main", "serve", "--config", str(config),
             "--port", str(port)], stdout=out, stderr=subprocess.STDOUT)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                if client.get("/v1/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"apportion serve did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield client, log
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)


def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_init_writes_a_config_that_loads_and_prints_the_next_commands(tmp_path: Path) -> None:
    """The example has two 8-GPU hosts, a tree of four budgets with the admin as member of
    every leaf, and that one admin; the next three commands are printed; a second init
    without --force refuses to overwrite."""
    target = tmp_path / "site"
    r = CliRunner().invoke(main, ["init", str(target), "--admin", "ada"])
    assert r.exit_code == 0, r.output
    config = load_config(target / "apportion.toml")
    assert [(h.name, h.gpus) for h in config.hosts] == [("gpu01", 8), ("gpu02", 8)]
    assert [b.path for b in config.budgets] == ["research", "research/llm", "research/vision",
                                                "ops"]
    assert [(u.name, u.admin) for u in config.users] == [("ada", True)]
    commands = [line.strip() for line in r.output.splitlines() if line.startswith("  ")]
    assert commands == [
        f"apportion serve --config {target / 'apportion.toml'}",
        "export APPORTION_URL=http://127.0.0.1:8642 APPORTION_TOKEN=$(cat "
        f"{target / 'apportion-data' / 'tokens' / 'ada'})",
        "apportion submit --budget research/llm --gpus 1 --min-runtime 30m -- nvidia-smi",
    ]
    again = CliRunner().invoke(main, ["init", str(target)])
    assert again.exit_code == 1 and "already exists (--force to overwrite)" in again.output


def test_init_says_when_the_admin_has_no_unix_account(tmp_path: Path) -> None:
    """An admin named for an account this host does not have: init still writes the config,
    and says on stderr that the local executor would refuse that user's work, and what to
    do; for the account init runs as, it says nothing."""
    r = CliRunner().invoke(main, ["init", str(tmp_path / "a"), "--admin",
                                  "apportion-no-such-account"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "a" / "apportion.toml").exists()
    assert r.stderr.startswith("\nnote: user apportion-no-such-account: Unix account "
                               "'apportion-no-such-account' does not exist, so the local "
                               "executor would refuse apportion-no-such-account's work")
    assert r.stderr.rstrip().endswith("or set [server] single_user = true")
    me = CliRunner().invoke(main, ["init", str(tmp_path / "b")])
    assert (me.exit_code, me.stderr) == (0, "")


def test_init_refuses_an_admin_name_the_config_would_refuse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--admin Bad.Name`` is a usage error naming the flag, in the config loader's words
    (it wrote a config serve refused: "users[0].name: 'Bad.Name' is not a user name"); a
    login name that is no user name (AD-style John.Doe), the default, is said to be one
    and --admin asked for; ``--admin ""`` is refused too (it was taken as the login name,
    root's config giving root's work root). Nothing is written."""
    r = CliRunner().invoke(main, ["init", str(tmp_path / "a"), "--admin", "Bad.Name"])
    assert r.exit_code == 2
    assert ("Invalid value for '--admin': 'Bad.Name' is not a user name: a lower-case "
            "letter or '_', then up to 31 lower-case letters, digits, '_' or '-'") in r.stderr
    monkeypatch.setattr("getpass.getuser", lambda: "John.Doe")
    r = CliRunner().invoke(main, ["init", str(tmp_path / "b")])
    assert r.exit_code == 2
    assert ("Error: the admin would be named after your login name, and 'John.Doe' is not "
            "a user name: a lower-case letter or '_', then up to 31 lower-case letters, "
            "digits, '_' or '-': name the admin with --admin NAME") in r.stderr
    r = CliRunner().invoke(main, ["init", str(tmp_path / "c"), "--admin", ""])
    assert r.exit_code == 2  # an empty --admin is refused, not taken as the login name
    assert "Invalid value for '--admin': '' is not a user name" in r.stderr
    assert not any((tmp_path / d).exists() for d in "abc")


def test_init_config_serves_and_runs_a_workload(tmp_path: Path) -> None:
    """The example config, with the in-memory executor, serves: the admin's token works
    and a submitted workload runs; the log has no migration-tool lines and no traceback."""
    CliRunner().invoke(main, ["init", str(tmp_path), "--admin", "ada"])
    config = tmp_path / "apportion.toml"
    config.write_text(config.read_text().replace('kind = "local"', 'kind = "memory"'))
    with serving(config, free_port()) as (client, log):
        token = (tmp_path / "apportion-data" / "tokens" / "ada").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        r = client.post("/v1/workloads", headers=auth, json={
            "budget": "research/llm", "gpus": 1, "min_runtime": "30m", "command": ["true"]})
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        until("the workload to start", lambda: client.get(
            f"/v1/workloads/{wid}", headers=auth).json()["attempts_count"] >= 1)
    text = log.read_text()
    assert "alembic" not in text and "Traceback" not in text, text


def test_serve_with_no_budgets_starts_quietly_and_says_how_to_add_one(tmp_path: Path) -> None:
    """No [[budgets]]: the server starts, logs once how to create a budget, never a
    traceback nor a failed pass; /v1/dashboard/state says the same; once an admin creates a
    budget, work submitted to it runs."""
    config = tmp_path / "apportion.toml"
    config.write_text('[server]\ndata_dir = "data"\n[executor]\nkind = "memory"\n'
                      '[scheduler]\ninterval_s = 0.2\n[[hosts]]\nname = "h1"\ngpus = 8\n'
                      '[[users]]\nname = "root"\nadmin = true\n')
    with serving(config, free_port()) as (client, log):
        until("the first passes", lambda: "no budgets yet" in log.read_text())
        time.sleep(1.0)  # several passes at interval 0.2 s: none may fail
        token = (tmp_path / "data" / "tokens" / "root").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        state = client.get("/v1/dashboard/state", headers=auth)
        assert state.status_code == 503
        assert "apportion budgets create PATH" in state.json()["detail"]
        r = client.post("/v1/budgets", headers=auth,
                        json={"path": "ai", "weight": 1, "members": ["root"]})
        assert r.status_code == 201, r.text
        r = client.post("/v1/workloads", headers=auth, json={
            "budget": "ai", "gpus": 1, "min_runtime": "1h", "command": ["true"]})
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        until("the workload to start", lambda: client.get(
            f"/v1/workloads/{wid}", headers=auth).json()["attempts_count"] >= 1)
    text = log.read_text()
    assert text.count("no budgets yet: scheduling starts once one exists; create one with "
                      "`apportion budgets create PATH --weight 1 --member USER`") == 1, text
    assert "Traceback" not in text and "failed" not in text and "alembic" not in text, text


def test_serve_on_a_database_of_a_newer_apportion_says_so_in_one_line(tmp_path: Path) -> None:
    """A database whose schema revision no migration here knows (made by a newer apportion,
    then the software rolled back): serve exits 1 with one line naming the database and
    what to do, not a traceback; the database is left as it was."""
    from sqlalchemy import text

    from apportion.service.store import Store

    config = tmp_path / "apportion.toml"
    config.write_text('[server]\ndata_dir = "data"\n[executor]\nkind = "memory"\n'
                      '[[hosts]]\nname = "h1"\ngpus = 8\n')
    (tmp_path / "data").mkdir()
    db = tmp_path / "data" / "apportion.db"
    store = Store(f"sqlite:///{db}")
    store.migrate()
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    store.close()
    r = subprocess.run([sys.executable, "-m", "apportion.cli.main", "serve", "--config",
                        str(config), "--port", str(free_port())],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith(f"Error: database sqlite:///{db}: its schema is not one this "
                               "apportion knows (Can't locate revision identified by "
                               "'9999'): it was made by a newer apportion"), r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    store = Store(f"sqlite:///{db}")
    with store.engine.begin() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "9999"
    store.close()


def test_first_start_audits_each_seeded_token_as_made_by_the_config(tmp_path: Path) -> None:
    """The token each configured user gets at the first start has its ``token.create``
    audit entry by ``config``, as the users, budgets and hosts seeded with it have."""
    from apportion.service.store import Store
    from apportion.service.store.seed import seed_store

    config = tmp_path / "apportion.toml"
    config.write_text(f'[server]\ndata_dir = "{tmp_path / "data"}"\n'
                      '[executor]\nkind = "memory"\n[[hosts]]\nname = "h1"\ngpus = 8\n'
                      '[[users]]\nname = "root"\nadmin = true\n[[users]]\nname = "alice"\n')
    store = Store(f"sqlite:///{tmp_path / 'apportion.db'}")
    store.migrate()
    try:
        assert sorted(seed_store(store, load_config(config), write_tokens=False)) == [
            "alice", "root"]
        created = sorted((a.target, a.actor, a.new) for a in store.audit()
                         if a.action == "token.create")
        assert created == [
            (user, "config", {"token": store.tokens(user)[0].id, "kind": "user", "label": ""})
            for user in ("alice", "root")]
    finally:
        store.close()


def test_a_restart_with_edited_users_and_budgets_says_in_one_line_they_are_ignored(
    tmp_path: Path,
) -> None:
    """[[users]] and [[budgets]] seed an empty database only: restarted with a config that
    adds a user, makes one an admin, changes a weight and a budget's members, the server
    says in one line what of it is ignored and how to change it; the database keeps its
    own (the first start says nothing of the kind)."""
    config = tmp_path / "apportion.toml"
    base = ('[server]\ndata_dir = "data"\n[executor]\nkind = "memory"\n'
            '[[hosts]]\nname = "h1"\ngpus = 8\n[[users]]\nname = "root"\nadmin = true\n'
            '[[users]]\nname = "alice"\n')
    config.write_text(base + '[[budgets]]\npath = "ai"\nweight = 2\nmembers = ["alice"]\n')
    with serving(config, free_port()) as (_, log):
        pass
    assert "seed an empty database only" not in log.read_text()
    config.write_text(base.replace('name = "alice"\n', 'name = "alice"\nadmin = true\n')
                      + '[[users]]\nname = "carol"\n[[budgets]]\npath = "ai"\nweight = 3\n'
                      'members = ["alice", "carol"]\n')
    with serving(config, free_port()) as (client, log):
        token = (tmp_path / "data" / "tokens" / "root").read_text().strip()
        budget = client.get("/v1/budgets", headers={"Authorization": f"Bearer {token}"})
        assert [(b["path"], b["weight"]) for b in budget.json()] == [("ai", 2.0)]
    lines = [ln for ln in log.read_text().splitlines() if "seed an empty database" in ln]
    assert lines == [
        "apportion: the config's [[users]] and [[budgets]] seed an empty database only: "
        "ignored where they differ from this one's (user alice: admin yes, the database's "
        "no; user carol: not in the database; budget ai: weight 3, the database's 2; budget "
        "ai: members alice,carol, the database's alice); change users with `apportion users "
        "add/set` and budgets with `apportion budgets create/set/members/managers` (as an "
        "admin)"]


def serve_exit(config: Path) -> subprocess.CompletedProcess[str]:
    """``apportion serve --config CONFIG`` that is expected to exit at start (on a free
    port: the default one may be another server's, which would be said first)."""
    return subprocess.run(
        [sys.executable, "-m", "apportion.cli.main", "serve", "--config", str(config),
         "--port", str(free_port())],
        capture_output=True, text=True, timeout=DEADLINE_S)


@pytest.mark.parametrize("disk", ["read-only", "a file in the way"])
def test_a_data_directory_the_server_cannot_write_stops_it_with_one_line(
    tmp_path: Path, disk: str
) -> None:
    """The data directory is on a read-only disk (an empty, read-only tmpfs mounted there:
    needs root, as CI runs the tests), or cannot be made (a file where its parent should
    be): ``serve`` exits 1 with one line naming the directory, the setting and the reason,
    no traceback. (``os.chmod`` raised ``OSError: [Errno 30] Read-only file system``
    through a traceback.)"""
    data = tmp_path / ("data" if disk == "read-only" else "file/data")
    config = tmp_path / "apportion.toml"
    config.write_text(f'[server]\ndata_dir = "{data}"\n[executor]\nkind = "memory"\n'
                      '[[hosts]]\nname = "h1"\ngpus = 8\n')
    if disk == "read-only":
        data.mkdir()
        # mode 0700: a tmpfs is 1777 by default, which serve refuses as writable by others
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m,mode=0700", "tmpfs",
                        str(data)], check=True)
    else:
        (tmp_path / "file").write_text("not a directory\n")
    try:
        r = serve_exit(config)
    finally:
        if disk == "read-only":
            subprocess.run(["umount", str(data)], check=True)
    reason = "Read-only file system" if disk == "read-only" else "Not a directory"
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr == (f"Error: data directory {data} ({config}: server.data_dir): "
                        f"{reason}\n"), r.stderr


def test_a_file_the_server_cannot_write_at_start_stops_it_with_one_line(
    tmp_path: Path,
) -> None:
    """The data directory is writable but the tokens directory in it is a file (the server
    cannot make it, as on a disk that stopped taking writes): ``serve`` exits 1 with one
    line naming the path and the reason, no traceback."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "tokens").write_text("not a directory\n")
    config = tmp_path / "apportion.toml"
    config.write_text(f'[server]\ndata_dir = "{data}"\n[executor]\nkind = "memory"\n'
                      '[[hosts]]\nname = "h1"\ngpus = 8\n[[users]]\nname = "root"\n'
                      'admin = true\n')
    r = serve_exit(config)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr == f"Error: cannot start: {data / 'tokens'}: File exists\n", r.stderr


@pytest.mark.parametrize("whose", ["data_dir of another user", "logs_dir of another user",
                                   "logs_dir a link of another user"])
def test_a_directory_another_user_holds_stops_serve_with_one_line(
    tmp_path: Path, whose: str
) -> None:
    """A data or logs directory owned by another account (``nobody``), or a link of theirs
    in a sticky shared directory in the place of the logs directory: ``serve`` exits 1
    with one line naming the directory, the setting, the owner and what to do, and leaves
    the directory (and where the link points) as it was. (The server took it, made it
    0711 and, as root, followed that user's links to truncate and chown files and make
    directories wherever they pointed.)"""
    nobody = pwd.getpwnam("nobody")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o1777)  # a shared /scratch
    theirs = scratch / "aplogs"
    if whose == "logs_dir a link of another user":
        target = tmp_path / "elsewhere"
        target.mkdir()
        os.chmod(target, 0o755)
        theirs.symlink_to(target)
        os.lchown(theirs, nobody.pw_uid, nobody.pw_gid)
    else:
        theirs.mkdir()
        os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
        os.chmod(theirs, 0o755)
        target = theirs
    key = "data_dir" if whose.startswith("data_dir") else "logs_dir"
    config = tmp_path / "apportion.toml"
    config.write_text(f'[server]\n{key} = "{theirs}"\n[executor]\nkind = "memory"\n'
                      '[[hosts]]\nname = "h1"\ngpus = 8\n')
    r = serve_exit(config)
    what = "data directory" if key == "data_dir" else "logs directory"
    problem = ("is a link of nobody, who could replace it: name the directory without it"
               if "link" in whose else
               f"owned by nobody, not by root, whom this server runs as; it would follow links "
               f"nobody puts there: make it root's (chown root {theirs}), or name a directory "
               "that does not exist yet (the server creates it)")
    assert r.returncode == 1, r.stdout + r.stderr
    where = f"{theirs} " if "link" in whose else ""
    assert r.stderr == f"Error: {what} {theirs} ({config}: server.{key}): {where}{problem}\n"
    st = target.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode), list(target.iterdir())) == (
        0 if "link" in whose else nobody.pw_uid, 0o755, [])


def test_a_link_of_another_user_reached_through_a_link_of_roots_stops_serve(
    tmp_path: Path,
) -> None:
    """``data_dir`` names root's link, which points at a link ``nobody`` owns in a sticky
    shared directory: ``serve`` exits 1 naming that link as on the data directory's way
    (it started: only the path as written and its final target's parents were looked at,
    so the other user could later point the server's files at a directory of theirs)."""
    nobody = pwd.getpwnam("nobody")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chmod(scratch, 0o1777)
    target = tmp_path / "real"
    target.mkdir()
    theirs = scratch / "link"
    theirs.symlink_to(target)
    os.lchown(theirs, nobody.pw_uid, nobody.pw_gid)
    roots = tmp_path / "rootlnk"
    roots.symlink_to(theirs)
    config = tmp_path / "apportion.toml"
    config.write_text(f'[server]\ndata_dir = "{roots}/data"\n[executor]\nkind = "memory"\n'
                      '[[hosts]]\nname = "h1"\ngpus = 8\n')
    r = serve_exit(config)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr == (f"Error: data directory {roots}/data ({config}: server.data_dir): "
                        f"{theirs}, on its way, is a link of nobody, who could replace it: "
                        "name the directory without it\n"), r.stderr
    assert list(target.iterdir()) == []


def test_init_writes_the_config_readable_by_its_owner_only(tmp_path: Path) -> None:
    """Under umask 022, ``init`` writes apportion.toml 0600 (it was 0644, and
    database.url may come to hold a password), and so does ``init --force`` over a 0644
    one."""
    old = os.umask(0o022)
    try:
        assert CliRunner().invoke(main, ["init", str(tmp_path)]).exit_code == 0
        config = tmp_path / "apportion.toml"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        os.chmod(config, 0o644)
        assert CliRunner().invoke(main, ["init", str(tmp_path), "--force"]).exit_code == 0
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600], ids=lambda m: f"{m:04o}")
def test_serve_warns_once_of_a_database_password_others_can_read(
    tmp_path: Path, mode: int
) -> None:
    """A config whose database.url holds a password: ``serve`` says once, at start, naming
    the file and its mode, that others can read it and what to do, when group or others
    may read the file; with 0600 it says nothing of it. (Nothing warned; a job can find the
    file from the server's command line.) The database is not reachable: serve then stops,
    after the warning."""
    config = tmp_path / "apportion.toml"
    config.write_text(f'[server]\ndata_dir = "{tmp_path / "data"}"\n[database]\n'
                      f'url = "postgresql+psycopg://ops:s3cret@127.0.0.1:{free_port()}/ap"\n'
                      '[executor]\nkind = "memory"\n[[hosts]]\nname = "h1"\ngpus = 8\n')
    os.chmod(config, mode)
    r = serve_exit(config)
    assert r.returncode == 1, r.stdout + r.stderr
    warning = (f"apportion: warning: {config} (mode {mode:04o}) holds the database's password "
               f"(database.url) and others can read it: chmod 600 {config}, or put the "
               "password in the server's ~/.pgpass or PGPASSWORD instead")
    assert r.stderr.splitlines().count(warning) == (0 if mode == 0o600 else 1), r.stderr
    assert "s3cret" not in r.stderr


def test_serve_refuses_a_config_without_usable_hosts_before_making_anything(
        tmp_path: Path) -> None:
    """``apportion serve`` with no ``--config`` is a usage error saying to give one (it said
    ``<defaults>: hosts: the local executor needs [[hosts]]``), and a config whose
    ``[[hosts]]`` its executor cannot take (none for the local executor, some for Slurm's)
    is refused naming the key: both before anything is made, where it once left a data
    directory with a new database (and its lock file) behind. Run as a process, as the
    server runs: serve sets the process's umask and logging, which must not leak into the
    tests after it."""
    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "apportion.cli.main", "serve", *args,
                               "--port", str(free_port())], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)

    r = serve()
    assert r.returncode == 2, r.stdout + r.stderr
    assert ("Error: no --config given, and without a config there are no [[hosts]] to run "
            "work on: give --config FILE (apportion init writes a commented one)") in r.stderr
    for executor, hosts, problem in (
            ("local", "", "hosts: the local executor needs [[hosts]]"),
            ("slurm", '[[hosts]]\nname = "n"\ngpus = 8\n',
             "hosts: the slurm executor takes its hosts from Slurm (sinfo); remove the "
             "[[hosts]] tables")):
        config = tmp_path / f"{executor}.toml"
        config.write_text(f'[server]\ndata_dir = "data-{executor}"\n[executor]\n'
                          f'kind = "{executor}"\n{hosts}')
        r = serve("--config", str(config))
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"Error: {config}: {problem}" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.toml", "slurm.toml"]
