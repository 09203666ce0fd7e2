"""Tokens and users from the API and the CLI, private data, ``public_read``, idempotent
submission (also under concurrency, on both databases) and the set-aside of work the policy
fails on."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_env import Env, start_env
from click.testing import CliRunner
from store_db import BACKENDS

from apportion.cli.main import main
from apportion.core import Status
from apportion.service import scheduler as scheduler_module
from apportion.service.executor import LaunchRefused

JOB = {"budget": "ai/llm", "gpus": 1, "min_runtime": "30m", "command": ["train", "--secret=1"]}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = start_env(tmp_path, "sqlite")
    yield e
    e.close()


def cli(env: Env, who: str, *args: str) -> Any:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False, env={
        "APPORTION_URL": env.server.url, "APPORTION_TOKEN": env.tokens[who],
        "APPORTION_CLIENT_CONFIG": "/dev/null"})
    return r


# ---- tokens and users ---------------------------------------------------------------------
def test_revoked_token_is_refused_at_once(env: Env) -> None:
    """A token used a moment ago (so cached) gets 401 on the very next request after its
    revocation; the audit log says who revoked it."""
    r = env.call("POST", "/v1/users/alice/tokens", "root", {"label": "laptop"})
    token, tid = r.json()["token"], r.json()["id"]
    env.tokens["laptop"] = token
    assert env.call("GET", "/v1/budgets", "laptop").status_code == 200
    assert env.call("POST", f"/v1/tokens/{tid}/revoke", "root").status_code == 200
    r = env.call("GET", "/v1/budgets", "laptop")
    assert r.status_code == 401 and r.json()["detail"] == "invalid token"
    assert env.call("GET", "/v1/budgets", "alice").status_code == 200  # her other token
    a = env.store.audit(limit=1)[0]
    assert (a.actor, a.action, a.target, a.new) == ("root", "token.revoke", "alice",
                                                    {"token": tid})
    assert env.call("POST", f"/v1/tokens/{tid}/revoke", "root").status_code == 409


def test_revoking_a_token_not_ones_own_answers_the_same_whether_its_id_exists(
        env: Env) -> None:
    """A non-admin revoking another user's token and one revoking an id no token has get
    the same answer (403, the same words but for the id), so ids cannot be probed; nothing
    is revoked. An admin still gets 404 for an id that does not exist."""
    other = env.call("POST", "/v1/users/alice/tokens", "root", {}).json()["id"]
    nobody = "t-000000000000"
    answers = [env.call("POST", f"/v1/tokens/{tid}/revoke", "bob") for tid in (other, nobody)]
    assert [r.status_code for r in answers] == [403, 403]
    assert [r.json()["detail"].replace(tid, "ID") for r, tid in zip(
        answers, (other, nobody), strict=True)] == 2 * [
        "forbidden: bob may not revoke token ID: it is not one of theirs (their own are in "
        "apportion tokens list)"]
    assert all(t.revoked_at is None for t in env.store.tokens("alice"))
    assert env.call("POST", f"/v1/tokens/{nobody}/revoke", "root").status_code == 404


def test_admin_flag_change_takes_effect_at_once(env: Env) -> None:
    """Making bob an admin lets his cached token create users at once; taking it away
    refuses the next request."""
    assert env.call("GET", "/v1/users", "bob").status_code == 403
    assert env.call("PATCH", "/v1/users/bob", "root", {"admin": True}).json()["admin"]
    assert env.call("GET", "/v1/users", "bob").status_code == 200
    env.call("PATCH", "/v1/users/bob", "root", {"admin": False})
    assert env.call("POST", "/v1/users", "bob", {"name": "eve"}).status_code == 403


def test_the_last_admin_cannot_drop_the_flag_but_can_once_another_admin_exists(
        env: Env) -> None:
    """root, the only admin, removing its own admin flag gets 409 saying why and what to do
    (and stays admin); once bob is admin with a token, root may drop its flag, and bob,
    now the last admin, may not."""
    r = cli(env, "root", "users", "set", "root", "--no-admin")
    assert r.exit_code == 49
    assert ("user root: admin: root is the last admin with a valid token; without the "
            "flag nobody could administer this server") in r.output
    assert env.store.get_user("root").admin
    assert env.call("PATCH", "/v1/users/bob", "root", {"admin": True}).status_code == 200
    r = env.call("PATCH", "/v1/users/root", "root", {"admin": False})
    assert r.status_code == 200 and not r.json()["admin"]
    r = env.call("PATCH", "/v1/users/bob", "bob", {"admin": False})
    assert r.status_code == 409 and "bob is the last admin" in r.json()["detail"]


def test_the_last_token_of_the_last_admin_cannot_be_revoked(env: Env) -> None:
    """Revoking root's only token (root the only admin) gets 409 and the token keeps
    working; with a second token made first, the first may be revoked."""
    (tid,) = [t["id"] for t in env.call("GET", "/v1/tokens?user=root", "root").json()]
    r = env.call("POST", f"/v1/tokens/{tid}/revoke", "root")
    assert r.status_code == 409
    assert r.json()["detail"] == (
        f"token {tid}: the last valid token of an admin (root); revoked, nobody could "
        "administer this server: create another first (apportion tokens create root), "
        "then revoke this one")
    assert env.call("GET", "/v1/users", "root").status_code == 200
    env.tokens["root2"] = env.call("POST", "/v1/users/root/tokens", "root").json()["token"]
    assert env.call("POST", f"/v1/tokens/{tid}/revoke", "root2").status_code == 200
    assert env.call("GET", "/v1/users", "root2").status_code == 200


def test_scrape_token_reads_but_never_writes(env: Env) -> None:
    """A scrape token of the admin reads /metrics and the API, but every write is 403
    and it sees no private fields."""
    r = env.call("POST", "/v1/users/root/tokens", "root", {"kind": "scrape"})
    assert r.json()["kind"] == "scrape"
    env.tokens["prom"] = r.json()["token"]
    env.call("POST", "/v1/workloads", "root", {**JOB, "budget": "ops"})
    assert env.call("GET", "/metrics", "prom").status_code == 200
    (w,) = env.call("GET", "/v1/workloads", "prom").json()
    assert w["private"] and w["command"] is None
    r = env.call("POST", "/v1/users", "prom", {"name": "eve"})
    assert r.status_code == 403 and "may only read" in r.json()["detail"]


def test_a_scrape_token_reading_its_own_users_logs_is_told_its_kind_refuses(
        env: Env) -> None:
    """alice's scrape token asking for the logs of alice's own workload gets 403 saying a
    scrape token cannot read private data, not that alice may not read her own logs."""
    env.tokens["prom"] = env.call("POST", "/v1/users/alice/tokens", "root",
                                  {"kind": "scrape"}).json()["token"]
    wid = env.call("POST", "/v1/workloads", "alice", JOB).json()["id"]
    r = env.call("GET", f"/v1/workloads/{wid}/logs", "prom")
    assert r.status_code == 403
    assert r.json()["detail"] == (f"forbidden: a scrape token of alice cannot read private "
                                  f"data (the logs of workload {wid})")


def test_users_and_tokens_from_the_cli(env: Env) -> None:
    """users add|list|set and tokens create|list|revoke do what they say; the created
    token works until revoked."""
    r = cli(env, "root", "users", "add", "erin", "--unix-user", "erin_x")
    assert r.exit_code == 0 and "erin: admin no, runs as erin_x" in r.output
    r = cli(env, "root", "users", "set", "erin", "--admin")
    assert r.exit_code == 0 and "erin: admin yes" in r.output
    r = cli(env, "root", "users", "list", "--json")
    assert {"name": "erin", "admin": True, "unix_user": "erin_x", "account": "erin_x",
            "cannot_run": None} in (  # the memory executor checks no account
        __import__("json").loads(r.stdout))
    r = cli(env, "root", "tokens", "create", "erin", "--label", "ci")
    assert r.exit_code == 0
    token = r.stdout.strip()
    env.tokens["erin"] = token
    assert env.call("GET", "/v1/users", "erin").status_code == 200
    r = cli(env, "root", "tokens", "list", "--user", "erin")
    assert r.exit_code == 0 and "ci" in r.output
    tid = r.output.splitlines()[1].split()[0]
    r = cli(env, "erin", "tokens", "revoke", tid)
    assert r.exit_code == 0 and f"revoked {tid}" in r.output
    assert env.call("GET", "/v1/users", "erin").status_code == 401
    r = cli(env, "alice", "users", "add", "mallory")
    assert r.exit_code == 43 and "admins only" in r.output


def test_a_user_lists_only_its_own_tokens(env: Env) -> None:
    """alice sees her tokens, not bob's; asking for bob's is 403."""
    mine = env.call("GET", "/v1/tokens", "alice").json()
    assert mine and {t["user"] for t in mine} == {"alice"}
    assert all("token" not in t and "hash" not in t for t in mine)
    assert env.call("GET", "/v1/tokens?user=bob", "alice").status_code == 403


# ---- private data -------------------------------------------------------------------------
def test_private_fields_only_for_owner_managers_and_admins(env: Env) -> None:
    """alice's command is shown to alice, dave (manager of ai/llm), carol (manager of ai)
    and root; bob sees her workload's budget, state and size but not its command, in the
    list and in show; and not its logs."""
    wid = env.call("POST", "/v1/workloads", "alice", JOB).json()["id"]
    for who in ("alice", "dave", "carol", "root"):
        (w,) = env.call("GET", "/v1/workloads", who).json()
        assert w["command"] == JOB["command"] and "private" not in w, who
    (w,) = env.call("GET", "/v1/workloads", "bob").json()
    assert (w["id"], w["budget"], w["gpus"], w["status"], w["user"]) == (
        wid, "ai/llm", 1, "pending", "alice")
    assert (w["command"], w["env"], w["chdir"], w["private"]) == (None, None, None, True)
    shown = env.call("GET", f"/v1/workloads/{wid}", "bob").json()
    assert shown["command"] is None and shown["private"]
    assert env.call("GET", f"/v1/workloads/{wid}/logs", "bob").status_code == 403
    r = cli(env, "bob", "show", wid)
    assert r.exit_code == 0 and "command:             (private)" in r.output
    assert "--secret" not in r.output
    env.scheduler.step()
    q = env.call("GET", "/v1/queue", "bob").json()
    assert "command" not in str(q) and "--secret" not in str(q)
    assert "--secret" not in env.call("GET", "/v1/dashboard/state", "bob").text


def test_a_refused_launchs_reason_is_private_as_the_command_is(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor refusing a launch names what it could not use (here the directory), so
    the end reason is private as the directory is: alice (owner) and root read it in the
    workload, its attempt and why; bob reads only that the launch was refused, in the list,
    in show, in why and in the dashboard's why."""
    secret = "/srv/secret/merger-acme"

    def refuse(launch: Any) -> str:
        raise LaunchRefused(f"chdir {secret}: No such file or directory")

    monkeypatch.setattr(env.scheduler.executor, "launch", refuse)
    wid = env.call("POST", "/v1/workloads", "alice", {**JOB, "chdir": secret}).json()["id"]
    env.scheduler.step()
    full = f"launch refused: chdir {secret}: No such file or directory"
    for who in ("alice", "root"):
        w = env.call("GET", f"/v1/workloads/{wid}", who).json()
        assert (w["status"], w["end_reason"], w["attempts"][0]["end_reason"]) == (
            "failed", full, full), who
        assert secret in str(env.call("GET", f"/v1/workloads/{wid}/why", who).json()["text"])
    public = "launch refused (why is private to its owner)"
    w = env.call("GET", f"/v1/workloads/{wid}", "bob").json()
    assert (w["end_reason"], w["attempts"][0]["end_reason"]) == (public, public)
    (listed,) = env.call("GET", "/v1/workloads?status=all", "bob").json()
    assert listed["end_reason"] == public
    for url in (f"/v1/workloads/{wid}/why", f"/v1/dashboard/why/{wid}"):
        r = env.call("GET", url, "bob")
        assert r.status_code == 200 and secret not in r.text and public in r.text, url
    assert secret not in env.call("GET", f"/v1/dashboard/why/{wid}", "alice").text


def test_public_read_opens_dashboard_why_and_metrics_only(tmp_path: Path) -> None:
    """With public_read the dashboard's data, why and /metrics answer without a token;
    every other read still needs one."""
    e = start_env(tmp_path, "sqlite", public_read=True)
    try:
        wid = e.call("POST", "/v1/workloads", "alice", JOB).json()["id"]
        e.scheduler.step()
        for url in ("/v1/dashboard/state", "/v1/dashboard/usage", "/metrics",
                    f"/v1/workloads/{wid}/why", f"/v1/dashboard/why/{wid}"):
            assert e.call("GET", url).status_code == 200, url
        for url in ("/v1/workloads", "/v1/budgets", f"/v1/workloads/{wid}", "/v1/audit"):
            assert e.call("GET", url).status_code == 401, url
    finally:
        e.close()


def test_dashboard_controls_list_the_weights_each_user_may_set(tmp_path: Path) -> None:
    """/v1/dashboard/controls, even with public_read, needs a user token (401 without) and
    lists, parents first, the weights its user may set: root every node, carol (manager of
    ai) the nodes below ai, dave (manager of the leaf ai/llm, whose own weight is carol's)
    and bob (a member) none."""
    e = start_env(tmp_path, "sqlite", public_read=True)
    try:
        assert e.call("GET", "/v1/dashboard/controls").status_code == 401
        got = {who: e.call("GET", "/v1/dashboard/controls", who).json()["set_weight"]
               for who in ("root", "carol", "dave", "bob")}
        assert got == {"root": ["ai", "ai/llm", "ai/vision", "ops"],
                       "carol": ["ai/llm", "ai/vision"], "dave": [], "bob": []}
    finally:
        e.close()


# ---- idempotent submission ----------------------------------------------------------------
def test_retry_with_the_same_key_answers_the_first_submission(env: Env) -> None:
    """The retry gets the same status and body (even after the workload started, ended and
    its budget stopped being a leaf), and there is one row; a different body with the same
    key is 409; another user may use the same key."""
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = env.call("POST", "/v1/workloads", "alice", JOB, headers=key)
    assert first.status_code == 201
    env.scheduler.step()
    again = env.call("POST", "/v1/workloads", "alice", JOB, headers=key)
    assert (again.status_code, again.json()) == (201, first.json())
    assert len(env.store.list_workloads(list(Status))) == 1
    # the leaf gets a child meanwhile: submitting there is refused now, the retry is not
    assert env.call("POST", f"/v1/workloads/{first.json()['id']}/cancel", "alice").is_success
    env.scheduler.step()
    assert env.store.get_workload(first.json()["id"]).status is Status.CANCELLED
    assert env.call("POST", "/v1/budgets", "root", {"path": "ai/llm/x"}).status_code == 201
    again = env.call("POST", "/v1/workloads", "alice", JOB, headers=key)
    assert (again.status_code, again.json()) == (201, first.json())
    r = env.call("POST", "/v1/workloads", "alice", {**JOB, "gpus": 2}, headers=key)
    assert r.status_code == 409 and "Idempotency-Key" in r.json()["detail"]
    r = env.call("POST", "/v1/workloads", "carol", {**JOB, "budget": "ai/vision"}, headers=key)
    assert r.status_code == 201 and r.json()["id"] != first.json()["id"]
    assert len(env.store.list_workloads(list(Status))) == 2


@pytest.mark.parametrize("key, shown", [
    ("a b", "'a b'"), ("", "''"), ("k" * 10_000, "'" + "k" * 40 + "...' (10000 characters)")])
def test_a_bad_idempotency_key_is_refused_with_the_rule_in_words(
        env: Env, key: str, shown: str) -> None:
    """An Idempotency-Key that is empty, holds a space or is longer than 255 characters is
    refused (422) with the header's name as sent, the key (cut at 40 characters) and the
    rule of security.md in words, not pydantic's pattern; nothing is stored."""
    r = env.call("POST", "/v1/workloads", "alice", JOB, headers={"Idempotency-Key": key})
    assert (r.status_code, r.json()["detail"]) == (422, (
        f"Idempotency-Key: {shown} is not a key: 1 to 255 printable ASCII characters, "
        "no spaces"))
    assert env.store.list_workloads(list(Status)) == []


def test_a_retried_array_submission_answers_the_first_array(env: Env) -> None:
    """An array sent twice with one Idempotency-Key is stored once (its 3 elements) and
    the retry gets the first answer, element ids included."""
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body = {**JOB, "array": "0-2"}
    first = env.call("POST", "/v1/workloads", "alice", body, headers=key)
    assert first.status_code == 201 and len(first.json()["array_ids"]) == 3
    again = env.call("POST", "/v1/workloads", "alice", body, headers=key)
    assert (again.status_code, again.json()) == (201, first.json())
    assert len(env.store.list_workloads(list(Status))) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_retries_store_one_row(tmp_path: Path, backend: str) -> None:
    """16 threads send the same submission with the same key at once: all get 201 with
    the same id, and one row is stored (SQLite and PostgreSQL)."""
    e = start_env(tmp_path, backend)
    try:
        key = str(uuid.uuid4())
        barrier = threading.Barrier(16)
        answers: list[tuple[int, str]] = []

        def send() -> None:
            with httpx.Client(base_url=e.server.url, timeout=60) as c:
                barrier.wait()
                r = c.post("/v1/workloads", json=JOB, headers={
                    "Authorization": f"Bearer {e.tokens['alice']}", "Idempotency-Key": key})
                answers.append((r.status_code, r.json()["id"]))

        threads = [threading.Thread(target=send) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(answers) == 16 and len(set(answers)) == 1 and answers[0][0] == 201
        assert len(e.store.list_workloads(list(Status))) == 1
    finally:
        e.close()


def test_cli_submit_sends_a_key_and_retries_on_5xx(env: Env, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    """apportion submit sends an Idempotency-Key; a 503 answer is retried with the same key
    and the submission is stored once."""
    seen: list[str | None] = []
    real = httpx.Client.request

    def flaky(self: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
        seen.append((kw.get("headers") or {}).get("Idempotency-Key"))
        r = real(self, method, url, **kw)  # stored on the server...
        if len(seen) == 1:
            return httpx.Response(503, json={"detail": "lost"})  # ...but the answer is lost
        return r

    monkeypatch.setattr(httpx.Client, "request", flaky)
    monkeypatch.setattr("apportion.cli.client.RETRY_WAITS", (0.01,) * 3)
    r = cli(env, "alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "30m", "--", "true")
    assert r.exit_code == 0, r.output
    assert len(seen) == 2 and seen[0] is not None and seen[0] == seen[1]
    assert len(env.store.list_workloads(list(Status))) == 1


# ---- set aside what the policy fails on ---------------------------------------------------
def test_workload_the_policy_fails_on_is_set_aside(env: Env, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    """A policy that raises whenever one given workload is queued: that workload is ended
    with the error as its reason (and audited); the others start in the same pass."""
    ids = [env.call("POST", "/v1/workloads", who, {**JOB, "budget": b}).json()["id"]
           for who, b in (("alice", "ai/llm"), ("bob", "ai/vision"), ("alice", "ai/llm"),
                          ("root", "ops"))]
    poison = ids[2]
    real = scheduler_module.decide_fleet

    def decide(st: Any, now: float, config: Any, reasons: bool = True) -> Any:
        if poison in st.pending:
            raise ZeroDivisionError("float division by zero")
        return real(st, now, config, reasons)

    monkeypatch.setattr(scheduler_module, "decide_fleet", decide)
    env.scheduler.step()
    w = env.store.get_workload(poison)
    assert w.status is Status.CANCELLED
    assert w.end_reason == (
        "set aside: the policy fails on it (ZeroDivisionError('float division by zero'))")
    assert [env.store.get_workload(i).status for i in ids if i != poison] == [
        Status.RUNNING] * 3
    assert env.store.audit(target=poison)[0].action == "workload.set_aside"
    assert env.scheduler.errors == 0


def test_cli_retry_is_bounded_when_the_server_stays_away(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A refused connection is retried once per RETRY_WAITS entry, then reported."""
    import click
    from server_proc import free_port

    from apportion.cli.client import Client

    tries: list[str] = []
    real = httpx.Client.request

    def counting(self: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
        tries.append(url)
        return real(self, method, url, **kw)

    monkeypatch.setattr(httpx.Client, "request", counting)
    monkeypatch.setattr("apportion.cli.client.RETRY_WAITS", (0.01,) * 3)
    client = Client(f"http://127.0.0.1:{free_port()}", "t")
    with pytest.raises(click.ClickException, match="cannot reach the server"):
        client.call("POST", "/workloads", JOB, headers={"Idempotency-Key": "k"}, retry=True)
    assert len(tries) == 4
    tries.clear()
    with pytest.raises(click.ClickException):
        client.call("GET", "/workloads")  # reads are not retried
    assert len(tries) == 1


def test_the_schema_still_gives_the_idempotency_keys_pattern(env: Env) -> None:
    """/openapi.json describes the Idempotency-Key header of POST /v1/workloads with its
    pattern (the check in words replaced pydantic's, not the schema's)."""
    op = env.client.get("/openapi.json").json()["paths"]["/v1/workloads"]["post"]
    [header] = [p for p in op["parameters"] if p["name"].lower() == "idempotency-key"]
    assert header["in"] == "header"
    schema = header["schema"]
    patterns = [s.get("pattern") for s in (schema, *schema.get("anyOf", []))]
    assert r"^[\x21-\x7e]{1,255}$" in patterns
