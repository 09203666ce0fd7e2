"""A real ``apportion serve`` running as root, with users mapped to real Unix accounts that
the test setup creates: what a job can and cannot reach, and what submit refuses."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import Server, free_port

from harness.accounts import UnixAccounts, unix_accounts

DEADLINE_S = 60.0  # bounds a hang only
SECRET = "APPORTION_TEST_SERVER_SECRET"
# opens each path (``w:PATH``: creates it) and prints the errno's name
PROBE = ("import errno, sys\n"
         "for p in sys.argv[1:]:\n"
         "    mode, path = ('wb', p[2:]) if p.startswith('w:') else ('rb', p)\n"
         "    try:\n        open(path, mode).close(); print(p, 'opened')\n"
         "    except OSError as e:\n        print(p, errno.errorcode[e.errno])\n")


@dataclass
class Site:
    server: Server
    base: Path
    accounts: UnixAccounts

    @property
    def data(self) -> Path:
        return self.base / "data"

    def call(self, who: str, method: str, path: str, body: Any = None,
             content: bytes | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.server.token(who)}"}
        if content is not None:
            headers["Content-Type"] = "application/json"
            return httpx.request(method, self.server.url + path, headers=headers,
                                 content=content, timeout=30)
        return httpx.request(method, self.server.url + path, headers=headers, json=body,
                             timeout=30)

    def submit(self, who: str, command: list[str], gpus: int = 1, **extra: Any) -> str:
        body = {"budget": "ai/llm", "gpus": gpus, "min_runtime": 60, "command": command,
                **extra}
        r = self.call(who, "POST", "/v1/workloads", body)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def wait(self, wid: str, *statuses: str) -> dict[str, Any]:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            w = self.call("admin", "GET", f"/v1/workloads/{wid}").json()
            if w["status"] in statuses:
                return dict(w)
            assert time.monotonic() < deadline, w
            time.sleep(0.1)

    def log(self, wid: str) -> str:
        r = self.call("admin", "GET", f"/v1/workloads/{wid}/logs")
        assert r.status_code == 200, r.text
        return r.text

    def home(self, who: str) -> Path:
        acct = self.accounts.alice if who == "alice" else self.accounts.bob
        d = self.base / who
        d.mkdir(exist_ok=True)
        os.chown(d, acct.uid, acct.gid)
        os.chmod(d, 0o700)
        return d


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with unix_accounts() as accounts:
        base = Path(tempfile.mkdtemp(prefix="apportion-e2e-iso-", dir="/tmp"))
        os.chmod(base, 0o755)  # anyone may enter: the server's own modes must protect it
        port = free_port()
        config = base / "apportion.toml"
        config.write_text(f"""[server]
host = "127.0.0.1"
port = {port}
data_dir = "data"
max_body_bytes = 4194304  # room for an argv over ARG_MAX, refused by the exec rule

[executor]
kind = "local"
grace_s = 2

[scheduler]
interval_s = 0.2

[[hosts]]
name = "h0"
gpus = 8

[[budgets]]
path = "ai/llm"
members = ["alice", "bob", "carol"]

[[users]]
name = "alice"
unix_user = "{accounts.alice.name}"

[[users]]
name = "bob"
unix_user = "{accounts.bob.name}"

[[users]]
name = "carol"

[[users]]
name = "admin"
admin = true
""")
        os.environ[SECRET] = "hunter2"  # in the server's environment, never in a job's
        server = Server(config, base / "server.log")
        try:
            server.start()
        finally:
            del os.environ[SECRET]
        try:
            yield Site(server, base, accounts)
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)


def test_serve_says_whom_work_runs_as_and_how_it_is_isolated(site: Site) -> None:
    """As root, ``apportion serve`` states at start that work runs as its owners' accounts
    and that each attempt gets a cgroup (v1 here, with the GPU device fence)."""
    log = (site.base / "server.log").read_text()
    assert "running as root: each workload runs as its owner's Unix account " \
           "(never as root: [server] allow_root_for is empty)" in log
    assert "cgroup v1 at /sys/fs/cgroup" in log and "GPU device nodes fenced" in log


@pytest.mark.parametrize(("who", "extra", "detail"), [
    ("carol", {}, "user carol: Unix account 'carol' does not exist"),
    ("alice", {"command": ["echo", "A" * 200_000]},
     "command.1: 200001 bytes, over the kernel's limit of 131072 bytes per argument"),
    ("alice", {"command": ["true", *(["A" * 100_000] * 25)]},
     "command and env: "),
    ("alice", {"chdir": "relative/dir"},
     "chdir: must be an absolute path, got 'relative/dir'"),
    ("alice", {"env": {"NOT A NAME": "x"}}, "env: 'NOT A NAME': not a variable name"),
    ("alice", {"env": {"X": "a\x00b"}}, "env.X: contains a NUL byte"),
    ("alice", {"env": {"BIG": "x" * 200_000}}, "env.BIG: 200005 bytes, over the kernel's"),
])
def test_submit_refuses_what_could_never_run(
    site: Site, who: str, extra: dict[str, Any], detail: str
) -> None:
    """A user without a Unix account, an argv or environment the kernel would refuse
    (E2BIG), a relative directory, a bad variable name or a NUL byte: 422 naming the field
    or user, and nothing stored."""
    before = len(site.call("admin", "GET", "/v1/workloads?status=all").json())
    body = {"budget": "ai/llm", "gpus": 1, "min_runtime": 60, "command": ["true"], **extra}
    r = site.call(who, "POST", "/v1/workloads", body)
    assert r.status_code == 422 and detail in r.json()["detail"], r.text
    assert len(site.call("admin", "GET", "/v1/workloads?status=all").json()) == before


def test_submit_refuses_an_environment_value_that_is_not_utf8(site: Site) -> None:
    """A lone surrogate in an exported value (valid JSON, not valid UTF-8) is a 422 that
    names the environment, and nothing is stored."""
    before = len(site.call("admin", "GET", "/v1/workloads?status=all").json())
    raw = (b'{"budget": "ai/llm", "gpus": 1, "min_runtime": 60, "command": ["true"], '
           b'"env": {"X": "\\ud800"}}')
    r = site.call("alice", "POST", "/v1/workloads", content=raw)
    assert r.status_code == 422 and "env" in r.json()["detail"], r.text
    assert len(site.call("admin", "GET", "/v1/workloads?status=all").json()) == before


def test_a_job_cannot_read_the_database_a_token_or_another_users_log(site: Site) -> None:
    """alice's job, running as alice, gets EACCES opening the server's database, the admin's
    token file and bob's log, and creating an exit file for bob's workload in the run
    directory (a forged "completed"); the data directory is 0711 (jobs cross it to their
    own checkpoint files; nobody may list it), the database 0600, and bob's log is bob's,
    0600."""
    bob = site.submit("bob", ["sh", "-c", "echo bob-private-output"],
                      chdir=str(site.home("bob")))
    site.wait(bob, "completed")
    bob_log = site.data / "logs" / bob / "1.log"
    run_dirs = [d for d in (site.data / "run").iterdir() if d.is_dir()]
    assert len(run_dirs) == 1  # run/<db_id>
    forged = f"w:{run_dirs[0] / f'{bob}.2.exit'}"
    targets = [site.data / "apportion.db", site.data / "tokens" / "admin", bob_log, forged]
    alice = site.submit("alice", ["/usr/bin/python3", "-c", PROBE, *map(str, targets)],
                        chdir=str(site.home("alice")))
    site.wait(alice, "completed")
    out = dict(line.rsplit(" ", 1) for line in site.log(alice).splitlines())
    assert out == {str(t): "EACCES" for t in targets}
    assert stat.S_IMODE(site.data.stat().st_mode) == 0o711
    assert stat.S_IMODE((site.data / "apportion.db").stat().st_mode) == 0o600
    st = bob_log.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (site.accounts.bob.uid, 0o600)
    assert site.log(bob) == "bob-private-output\n"


def _cli(site: Site, who: str, cwd: Path, env: dict[str, str], *args: str) -> str:
    full = {"PATH": os.environ["PATH"], "APPORTION_URL": site.server.url,
            "APPORTION_TOKEN": site.server.token(who), **env}
    r = subprocess.run([sys.executable, "-m", "apportion.cli.main", "submit", "--json",
                        "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "60", *args],
                       cwd=cwd, env=full, capture_output=True, text=True, check=False,
                       timeout=DEADLINE_S)
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["id"])


def test_cli_submit_runs_in_the_submitters_directory_with_their_environment(
    site: Site,
) -> None:
    """``apportion submit`` from alice's directory runs the job there, as alice, with her
    shell's environment (--export=ALL, the default) but not her apportion token; with
    ``--export=NONE,ONLY=1`` and ``--chdir`` it gets just that variable, in that directory."""
    home = site.home("alice")
    sub = home / "sub"
    sub.mkdir(exist_ok=True)
    os.chown(sub, site.accounts.alice.uid, site.accounts.alice.gid)
    wid = _cli(site, "alice", home, {"SUBMITTER_VAR": "from her shell"},
               "--", "sh", "-c", "id -un; pwd; env")
    site.wait(wid, "completed")
    user, cwd, *env_lines = site.log(wid).splitlines()
    env = dict(line.split("=", 1) for line in env_lines)
    assert (user, cwd) == (site.accounts.alice.name, str(home))
    assert env["SUBMITTER_VAR"] == "from her shell" and env["APPORTION_WORKLOAD_ID"] == wid
    assert "APPORTION_TOKEN" not in env and SECRET not in env
    wid = _cli(site, "alice", home, {"SUBMITTER_VAR": "not exported"},
               "--export", "NONE,ONLY=1", "--chdir", str(sub), "--", "sh", "-c", "pwd; env")
    site.wait(wid, "completed")
    cwd, *env_lines = site.log(wid).splitlines()
    env = dict(line.split("=", 1) for line in env_lines)
    assert cwd == str(sub) and env["ONLY"] == "1" and "SUBMITTER_VAR" not in env


def test_leftovers_of_a_cancelled_job_die_before_its_gpus_are_given_again(site: Site) -> None:
    """A cancelled 8-GPU job leaves a ``setsid`` and a double-forked child that ignore
    SIGTERM; the next 8-GPU job, which waits for those GPUs, finds neither alive when it
    starts (the attempt ended only once its whole cgroup was empty)."""
    home = site.home("alice")
    p1, p2, ready = home / "c1", home / "c2", home / "c-ready"
    script = (
        f"(setsid sh -c 'trap \"\" TERM; echo $$ > {p1}; exec sleep 300' &); "
        f"(sh -c 'trap \"\" TERM; echo $$ > {p2}; exec sleep 300' &); "
        f"while [ ! -s {p1} ] || [ ! -s {p2} ]; do sleep 0.05; done; touch {ready}; "
        "sleep 300 & wait"
    )
    first = site.submit("alice", ["sh", "-c", script], gpus=8, chdir=str(home))
    deadline = time.monotonic() + DEADLINE_S
    while not ready.exists():
        assert time.monotonic() < deadline, site.log(first)
        time.sleep(0.05)
    pids = [p1.read_text().strip(), p2.read_text().strip()]
    check = "; ".join(f"[ -e /proc/{p} ] && echo alive {p}" for p in pids) + "; echo checked"
    second = site.submit("bob", ["sh", "-c", check], gpus=8, chdir=str(site.home("bob")))
    assert site.call("alice", "POST", f"/v1/workloads/{first}/cancel").status_code == 200
    assert site.wait(first, "cancelled")["status"] == "cancelled"
    site.wait(second, "completed")
    assert site.log(second) == "checked\n"
    assert all(not Path(f"/proc/{p}").exists() for p in pids)


def test_the_api_does_not_follow_a_link_put_in_place_of_a_log(site: Site) -> None:
    """A log replaced by a link to a file only the server may read (as an owner of the log's
    directory could with the Slurm executor) is not served: 404, nothing of the file."""
    wid = site.submit("alice", ["true"], chdir=str(site.home("alice")))
    site.wait(wid, "completed")
    log = site.data / "logs" / wid / "1.log"
    log.unlink()
    log.symlink_to(site.data / "tokens" / "admin")
    r = site.call("alice", "GET", f"/v1/workloads/{wid}/logs")
    assert r.status_code == 404 and "log file is a symbolic link" in r.json()["detail"]
    assert site.server.token("admin") not in r.text


def test_an_admin_maps_a_new_user_to_an_account_through_the_api(site: Site) -> None:
    """``POST /v1/users`` with ``unix_user`` maps the new user to that account (dora's work
    runs as bob's account); a name that cannot be a Unix account is a 422 naming the field."""
    bad = site.call("admin", "POST", "/v1/users", {"name": "eve", "unix_user": "a/b"})
    assert bad.status_code == 422 and "unix_user" in bad.json()["detail"]
    r = site.call("admin", "POST", "/v1/users",
                  {"name": "dora", "unix_user": site.accounts.bob.name})
    assert r.status_code == 201 and r.json()["unix_user"] == site.accounts.bob.name
    token = site.call("admin", "POST", "/v1/users/dora/tokens").json()["token"]
    members = {"members": ["alice", "bob", "carol", "dora"]}
    assert site.call("admin", "PUT", "/v1/budgets/ai/llm/members", members).status_code == 200
    r = httpx.post(site.server.url + "/v1/workloads", timeout=30,
                   headers={"Authorization": f"Bearer {token}"},
                   json={"budget": "ai/llm", "gpus": 1, "min_runtime": 60,
                         "command": ["id", "-un"], "chdir": str(site.home("bob"))})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    site.wait(wid, "completed")
    assert site.log(wid) == f"{site.accounts.bob.name}\n"
