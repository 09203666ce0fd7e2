"""The HTTP API: validation, rights, audit. Real store (SQLite; PostgreSQL for a smoke test),
real FastAPI app served by uvicorn on a local port."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from store_db import BACKENDS, ServerThread, SwappableApp, db_url, write_config

from apportion import __version__
from apportion.core import HostState, Status
from apportion.service import bodies
from apportion.service.api import create_app
from apportion.service.clock import FakeClock
from apportion.service.config import ServiceConfig, load_config
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.routes.workloads import LOG_ANSWER_MAX
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store
from apportion.service.store.seed import seed_store
from apportion.service.store.store import newest_revision


@dataclass
class Service:
    client: httpx.Client
    server: ServerThread
    store: Store
    scheduler: Scheduler
    clock: FakeClock
    config: ServiceConfig
    tokens: dict[str, str]
    own_server: bool = True

    def call(self, method: str, url: str, who: str | None = None,
             body: Any = None, raw: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        if raw is not None:
            headers["Content-Type"] = "application/json"
            return self.client.request(method, url, headers=headers, content=raw)
        return self.client.request(method, url, headers=headers, json=body)


def make_service(tmp_path: Path, backend: str = "sqlite",
                 template: tuple[Path, dict[str, str]] | None = None,
                 shared: tuple[ServerThread, SwappableApp] | None = None) -> Service:
    """A seeded service. With ``template`` (a seeded SQLite file and its tokens), the file is
    copied instead of migrating and seeding again, which keeps the many API tests fast."""
    config = load_config(write_config(tmp_path))
    if template is not None:
        shutil.copy(template[0], tmp_path / "apportion.db")
        store, tokens = Store(db_url("sqlite", tmp_path)), dict(template[1])
    else:
        store = Store(db_url(backend, tmp_path))
        store.migrate()
        tokens = seed_store(store, config)
    clock = FakeClock(1_000_000.0)
    executor = MemoryExecutor([(h.name, h.gpus) for h in config.hosts], clock)
    sched = Scheduler(store, executor, config.policy, clock, grace_s=config.executor.grace_s)
    app = create_app(store, sched, config)
    if shared is not None:
        server, swap = shared
        swap.app = app
    else:
        server = ServerThread(app)
    client = httpx.Client(base_url=server.url, timeout=30)
    return Service(client, server, store, sched, clock, config, tokens,
                   own_server=shared is None)


def close_service(s: Service) -> None:
    s.client.close()
    if s.own_server:
        s.server.stop()
    s.store.close()


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    d = tmp_path_factory.mktemp("template")
    s = make_service(d)
    close_service(s)  # closing checkpoints the WAL: the .db file alone is complete
    return d / "apportion.db", s.tokens


@pytest.fixture(scope="session")
def shared_server() -> Iterator[tuple[ServerThread, SwappableApp]]:
    swap = SwappableApp()
    server = ServerThread(swap)
    yield server, swap
    server.stop()


@pytest.fixture
def svc(tmp_path: Path, template: tuple[Path, dict[str, str]],
        shared_server: tuple[ServerThread, SwappableApp]) -> Iterator[Service]:
    s = make_service(tmp_path, template=template, shared=shared_server)
    yield s
    close_service(s)


JOB = {"budget": "ai/llm", "gpus": 2, "min_runtime": "30m", "command": ["sleep", "60"]}


def submit(svc: Service, who: str = "alice", **over: Any) -> Any:
    return svc.call("POST", "/v1/workloads", who, {**JOB, **over})


# ---- submission and validation -----------------------------------------------------------
def test_submit_stores_and_schedules(svc: Service) -> None:
    """A valid submission is stored pending, owned by the caller; the next pass starts it."""
    r = submit(svc, resumable=True, priority=2, checkpoint_interval=600)
    assert r.status_code == 201, r.text
    w = r.json()
    assert (w["status"], w["user"], w["min_runtime"], w["resumable"]) == (
        "pending", "alice", 1800.0, True)
    assert w["submit_time"] == svc.clock.now()
    assert svc.store.get_workload(w["id"]).checkpoint_interval == 600.0
    svc.scheduler.step()
    assert svc.store.get_workload(w["id"]).status is Status.RUNNING


@pytest.mark.parametrize(
    ("name", "body", "field_"),
    [
        ("negative gpus", {**JOB, "gpus": -1}, "gpus"),
        ("zero gpus", {**JOB, "gpus": 0}, "gpus"),
        ("more than the cluster", {**JOB, "gpus": 17}, "gpus"),
        ("min_runtime over the cap", {**JOB, "min_runtime": "9h"}, "min_runtime"),
        ("min_runtime not a duration", {**JOB, "min_runtime": "soon"}, "min_runtime"),
        ("negative min_runtime", {**JOB, "min_runtime": -5}, "min_runtime"),
        ("unknown budget", {**JOB, "budget": "ai/nope"}, "budget"),
        ("inner budget", {**JOB, "budget": "ai"}, "not a leaf"),
        ("gpus not a number", {**JOB, "gpus": "many"}, "gpus"),
        ("empty command", {**JOB, "command": []}, "command"),
        ("missing budget", {k: v for k, v in JOB.items() if k != "budget"}, "budget"),
        ("unknown field", {**JOB, "colour": "red"}, "colour"),
    ],
)
def test_submit_rejects_bad_input(svc: Service, name: str, body: dict[str, Any],
                                  field_: str) -> None:
    """Bad submissions get 422 with a message naming the field; nothing is stored."""
    r = svc.call("POST", "/v1/workloads", "alice", body)
    assert r.status_code == 422, (name, r.text)
    assert field_ in r.json()["detail"], (name, r.json())
    assert svc.store.list_workloads() == []


def test_a_leaf_turned_inner_after_the_check_refuses_the_submission_422(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """When ``ai/llm`` gets a child after the route checked the tree but before the insert,
    the submission gets the 422 of a submission to an inner node, and nothing is stored."""
    add = svc.store.add_workload

    def child_first(**kw: Any) -> Any:
        svc.store.add_budget("ai/llm/c", 1, actor="root")
        return add(**kw)

    monkeypatch.setattr(svc.store, "add_workload", child_first)
    r = submit(svc)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == ("budget 'ai/llm': not a leaf; workloads draw on leaf "
                                  "budgets (below it: ai/llm/c)")
    assert svc.store.list_workloads(statuses=list(Status)) == []


@pytest.mark.parametrize("content_type", [
    "application/x-www-form-urlencoded", "text/plain", None])
def test_a_json_body_sent_as_another_content_type_is_told_to_say_json(
        svc: Service, content_type: str | None) -> None:
    """A valid JSON submission sent as curl -d sends it (form-urlencoded), as text/plain or
    with no Content-Type: 422 saying to send it as JSON with Content-Type:
    application/json and what it came as, not 'body: Input should be a valid dictionary
    or object to extract fields from'; nothing is stored."""
    headers = {"Authorization": f"Bearer {svc.tokens['alice']}"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    r = svc.client.post("/v1/workloads", headers=headers, content=json.dumps(JOB))
    came = f"it came as {content_type}" if content_type else "it came without one"
    assert (r.status_code, r.json()["detail"]) == (
        422, f"body: send the body as JSON with Content-Type: application/json ({came})")
    assert svc.store.list_workloads() == []


def test_malformed_json_is_rejected(svc: Service) -> None:
    """A body that is not JSON gets 422 'body: malformed JSON'; nothing is stored."""
    r = svc.call("POST", "/v1/workloads", "alice", raw='{"budget": "ai/llm", "gpus": ')
    assert r.status_code == 422
    assert r.json()["detail"].startswith("body: malformed JSON")
    assert svc.store.list_workloads() == []


def test_malformed_json_says_the_line_and_column_where_it_breaks(svc: Service) -> None:
    """A body that is not JSON gets 422 whose detail says what the parser expected and the
    line and column (counted from 1) where it stopped, on the first line and on a later
    one; nothing is stored."""
    r = svc.call("POST", "/v1/workloads", "alice", raw='{"budget": "ai/llm", "gpus": ')
    assert (r.status_code, r.json()["detail"]) == (
        422, "body: malformed JSON: Expecting value at line 1, column 30")
    r = svc.call("POST", "/v1/workloads", "alice", raw='{\n  "budget": "ai/llm",\n  gpus: 2\n}')
    assert (r.status_code, r.json()["detail"]) == (
        422, "body: malformed JSON: Expecting property name enclosed in double quotes "
             "at line 3, column 3")
    assert svc.store.list_workloads() == []


def test_json_nested_too_deep_is_a_400_saying_so(svc: Service) -> None:
    """A body of arrays nested 100 000 deep (past what the JSON parser takes) gets 400 with
    'body: nested too deep: ...', as docs/api.md says, not FastAPI's bare 'There was an
    error parsing the body'; one nested 100 deep still gets the 422 of a body that is no
    object; nothing is stored."""
    r = svc.call("POST", "/v1/workloads", "alice", raw="[" * 100_000 + "]" * 100_000)
    assert r.status_code == 400
    assert r.json()["detail"].startswith("body: nested too deep: more arrays or objects")
    r = svc.call("POST", "/v1/workloads", "alice", raw="[" * 100 + "]" * 100)
    assert r.status_code == 422 and r.json()["detail"].startswith("body: ")
    assert svc.store.list_workloads() == []


def test_a_budgets_path_with_a_trailing_slash_is_redirected_not_405(svc: Service) -> None:
    """GET and POST /v1/budgets/, GET /v1/budgets/usage/ and PUT
    /v1/budgets/<path>/members/ and .../managers/ get 307 to the path without the slash,
    as /v1/hosts/ and /v1/workloads/ do, not 405 Method Not Allowed (the PATCH route's
    {path:path} matched them by path alone); followed, the redirect answers as the path
    without the slash does; a path with a slash that a route takes as it is (PATCH
    /v1/budgets/ai/llm/, a budget named so) is not redirected."""
    for method, url, body in [("GET", "/v1/budgets/", None), ("GET", "/v1/budgets/usage/", None),
                              ("POST", "/v1/budgets/", {"path": "ops/x"}),
                              ("PUT", "/v1/budgets/ai/llm/members/", {"members": ["alice"]}),
                              ("PUT", "/v1/budgets/ai/llm/managers/", {"managers": []}),
                              ("GET", "/v1/hosts/", None)]:
        r = svc.call(method, url, "root", body=body)
        assert (r.status_code, r.headers.get("location")) == (
            307, f"{svc.client.base_url}{url.rstrip('/')}"), (method, url, r.text)
    followed = svc.client.post("/v1/budgets/", json={"path": "ops/x"}, follow_redirects=True,
                               headers={"Authorization": f"Bearer {svc.tokens['root']}"})
    assert followed.status_code == 201 and followed.json()["path"] == "ops/x"
    r = svc.call("PATCH", "/v1/budgets/ai/llm/", "root", body={"weight": 2})
    assert r.status_code == 404 and "did you mean ai/llm" in r.json()["detail"]


def test_an_env_name_over_the_kernels_limit_is_named_shortened(svc: Service) -> None:
    """A submission whose env holds a variable name of 200 000 characters (a valid name,
    over the kernel's MAX_ARG_STRLEN) gets a 422 naming env and the name's first 40
    characters with its length, not a detail echoing all 200 000; nothing is stored."""
    key = "A" * 200_000
    r = submit(svc, env={key: "b"})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert detail.startswith(f"env.{'A' * 40}... (200000 characters): 200003 bytes, over the "
                             "kernel's limit"), detail[:200]
    assert len(detail) < 300
    assert svc.store.list_workloads() == []


def test_a_body_sent_to_cancel_or_revoke_is_refused_not_ignored(svc: Service) -> None:
    """POST /v1/workloads/{id}/cancel and POST /v1/tokens/{id}/revoke take no body: one with
    a field gets 422 naming it and malformed JSON gets 422 'body: malformed JSON', and
    neither cancels nor revokes (they were done, the body unread); no body, {} or null
    cancel and revoke as before."""
    wid = submit(svc).json()["id"]
    tokens = [svc.call("POST", "/v1/users/alice/tokens", "root", body={}).json()["id"]
              for _ in range(3)]
    for url in (f"/v1/workloads/{wid}/cancel", f"/v1/tokens/{tokens[0]}/revoke"):
        r = svc.call("POST", url, "root", body={"reason": "stuck"})
        assert (r.status_code, r.json()["detail"]) == (
            422, "reason: Extra inputs are not permitted"), url
        r = svc.call("POST", url, "root", raw="{")
        assert r.status_code == 422 and r.json()["detail"].startswith("body: malformed JSON")
    assert svc.store.get_workload(wid).status.value == "pending"
    assert all(t.revoked_at is None for t in svc.store.tokens("alice"))
    assert svc.call("POST", f"/v1/workloads/{wid}/cancel", "root").status_code == 200
    assert svc.call("POST", f"/v1/tokens/{tokens[0]}/revoke", "root").status_code == 200
    assert svc.call("POST", f"/v1/tokens/{tokens[1]}/revoke", "root", body={}).status_code == 200
    assert svc.call("POST", f"/v1/tokens/{tokens[2]}/revoke", "root",
                    raw="null").status_code == 200


def test_a_report_period_of_1e300_seconds_is_refused_in_a_short_number(svc: Service) -> None:
    """GET /v1/reports/usage?from=-1e300: 422 'from: the period may be at most 3,660 days,
    got 1.16e+295', the length in days in a few digits, not written out with almost 300 of
    them; a period a little over the limit is still written out whole (4,000 days)."""
    r = svc.call("GET", "/v1/reports/usage?from=-1e300", "root")
    assert (r.status_code, r.json()["detail"]) == (
        422, "from: the period may be at most 3,660 days, got 1.16e+295")
    r = svc.call("GET", "/v1/reports/usage?from=4000d", "root")
    assert (r.status_code, r.json()["detail"]) == (
        422, "from: the period may be at most 3,660 days, got 4,000")


def test_a_workload_name_outside_its_characters_is_refused_in_words(svc: Service) -> None:
    """A submission named with a character the name may not hold ('träin-1', 'a b') gets a
    422 saying the rule in words and which character broke it, not pydantic's "String
    should match pattern '^[A-Za-z0-9._+-]+$'"; an empty name is told to be left out;
    nothing is stored."""
    for name, detail in [
        ("träin-1", "name: 'träin-1' is not a name: character 3 ('ä') is not an ASCII "
                    "letter, a digit, '.', '_', '+' or '-'"),
        ("a b", "name: 'a b' is not a name: character 2 (' ') is not an ASCII letter, a "
                "digit, '.', '_', '+' or '-'"),
        ("", "name: must not be empty (leave it out for none)"),
    ]:
        r = submit(svc, name=name)
        assert (r.status_code, r.json()["detail"]) == (422, detail)
    assert svc.store.list_workloads() == []
    assert submit(svc, name="train-1.v2+x_y").status_code == 201


def test_a_budget_created_with_a_name_twice_stores_it_once(svc: Service) -> None:
    """POST /v1/budgets with members ["bob", "alice", "bob"] and managers ["dave", "dave"]
    stores, answers, lists and audits each name once (sorted, as PUT .../members stores
    them), not the lists as sent: a manager listed twice stayed twice, and a later PUT of
    the same single name changed nothing."""
    r = svc.call("POST", "/v1/budgets", "root", {
        "path": "ops/x", "members": ["bob", "alice", "bob"], "managers": ["dave", "dave"]})
    assert r.status_code == 201, r.text
    assert (r.json()["members"], r.json()["managers"]) == (["alice", "bob"], ["dave"])
    listed = next(b for b in svc.call("GET", "/v1/budgets", "root").json()
                  if b["path"] == "ops/x")
    assert (listed["members"], listed["managers"]) == (["alice", "bob"], ["dave"])
    created = svc.call("GET", "/v1/audit?target=ops/x", "root").json()[0]
    assert created["action"] == "budget.create"
    assert (created["new"]["members"], created["new"]["managers"]) == (["alice", "bob"], ["dave"])


def test_a_query_parameter_given_twice_is_refused_naming_it(svc: Service) -> None:
    """GET /v1/workloads?user=alice&user=bob and GET /v1/audit?action=...&action=... get a
    422 naming the parameter and the values sent, not the answer for the last value alone
    (the first was dropped unread); given once each, they answer 200."""
    r = svc.call("GET", "/v1/workloads?user=alice&user=bob", "root")
    assert (r.status_code, r.json()["detail"]) == (
        422, "user: given 2 times ('alice', 'bob'); give it once")
    r = svc.call("GET", "/v1/audit?action=budget&action=token&action=host", "root")
    assert (r.status_code, r.json()["detail"]) == (
        422, "action: given 3 times ('budget', 'token', 'host'); give it once")
    assert svc.call("GET", "/v1/workloads?user=alice&status=all", "root").status_code == 200


@pytest.mark.parametrize(("url", "param"), [
    ("/v1/workloads?limit=lots", "limit"),  # the parameter's type (FastAPI's check)
    ("/v1/workloads?limit=0", "limit"),
    ("/v1/audit?before=0", "before"),
    ("/v1/workloads?after=w-999999", "after"),  # the handler's own checks
    ("/v1/workloads?status=sleeping", "status"),
    ("/v1/workloads?budget=ai%00", "budget"),  # every route's NUL and length check
    ("/v1/workloads?user=alice&user=bob", "user"),  # given twice
    ("/v1/workloads?stauts=all", "stauts"),  # unknown
    ("/v1/reports/usage?from=soon", "from"),
    ("/v1/reports/usage?format=pdf", "format"),
])
def test_every_query_parameter_error_names_the_parameter_alone(
        svc: Service, url: str, param: str) -> None:
    """Whichever check refuses a query parameter (its type, the route's handler, the NUL,
    length, repeat and unknown-parameter checks every route gets), the 422's detail starts
    with the parameter's name as in the URL and a colon (``limit: ...``, as ``after: ...``),
    never ``query.limit: ...`` for some checks and ``after: ...`` for others."""
    r = svc.call("GET", url, "root")
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(f"{param}: "), r.json()["detail"]


def test_an_unknown_query_parameter_is_refused_naming_what_the_route_takes(
        svc: Service) -> None:
    """GET /v1/workloads?stauts=all (a typo) and ?page=2 (a guess at paging) get a 422
    naming the parameter, the closest one the route takes and all it takes, not the
    default answer as if they were not there (a script paging with ?page= looped on the
    first page); a route with no parameter says so; known ones (a dependency's too: why's
    tz) are taken (why answers 503 here: no scheduler pass yet)."""
    takes = "(GET /v1/workloads takes: after, array, budget, limit, status, user)"
    r = svc.call("GET", "/v1/workloads?stauts=all", "bob")
    assert (r.status_code, r.json()["detail"]) == (
        422, f"stauts: unknown parameter; did you mean status? {takes}")
    r = svc.call("GET", "/v1/workloads?page=2", "bob")
    assert (r.status_code, r.json()["detail"]) == (422, f"page: unknown parameter {takes}")
    r = svc.call("GET", "/v1/hosts?verbose=1", "bob")
    assert (r.status_code, r.json()["detail"]) == (
        422, "verbose: unknown parameter (GET /v1/hosts takes: none)")
    wid = submit(svc).json()["id"]
    for url in ("/v1/workloads?status=all&limit=5", f"/v1/workloads/{wid}/why?tz=UTC",
                "/v1/audit?limit=1", "/v1/tokens?user=bob"):
        assert svc.call("GET", url, "root").status_code in (200, 503), url


def test_a_filter_that_names_nothing_is_a_422_naming_it(svc: Service) -> None:
    """GET /v1/workloads with an empty status, or an array id that is no workload's or no
    array's, and GET /v1/tokens (an admin) with a user who does not exist: 422 naming the
    parameter, as for an unknown budget or user, not an empty list; an array's own id
    lists its elements."""
    array = submit(svc, array="0-1").json()
    single = submit(svc).json()["id"]
    for url, detail in [
        ("/v1/workloads?status=", "status: empty; give 'all' or some of: pending, "),
        ("/v1/workloads?array=garbage", "array: workload garbage: not found"),
        ("/v1/workloads?array=w-999999", "array: workload w-999999: not found"),
        (f"/v1/workloads?array={single}", f"array: workload {single}: not an array"),
        ("/v1/tokens?user=nobody", "user: user nobody: not found"),
        ("/v1/tokens?user=alic", "user: user alic: not found; did you mean alice?"),
    ]:
        r = svc.call("GET", url, "root")
        assert r.status_code == 422 and r.json()["detail"].startswith(detail), (url, r.text)
    listed = svc.call("GET", f"/v1/workloads?array={array['id']}", "root").json()
    assert [w["id"] for w in listed] == array["array_ids"]
    assert [t["user"] for t in svc.call("GET", "/v1/tokens?user=alice", "root").json()] == [
        "alice"]


def test_an_arrays_other_element_given_as_the_array_is_refused_naming_the_arrays_id(
    svc: Service,
) -> None:
    """GET /v1/workloads?array= (what ``cancel --array`` asks) with the id of an array's
    element other than its first: a 422 saying it is an element, its index and the
    array's id to give, not "not an array" (it is one's element), and nothing listed."""
    array = submit(svc, array="0-2").json()
    second = array["array_ids"][1]
    r = svc.call("GET", f"/v1/workloads?array={second}", "root")
    assert r.status_code == 422
    assert r.json()["detail"] == (
        f"array: workload {second}: not an array's id: it is element 1 of array "
        f"{array['id']} (the array's id, its first element's, names the whole array)")


def test_queue_and_show(svc: Service) -> None:
    """The queue lists active workloads; show gives one with its attempts."""
    wid = submit(svc).json()["id"]
    submit(svc, who="bob", budget="ai/vision")
    svc.store.begin_attempt(wid, [("h1", 2, [0, 1])], 1_000_001.0)
    q = svc.call("GET", "/v1/workloads?status=running", "bob").json()
    assert [w["id"] for w in q] == [wid]
    assert len(svc.call("GET", "/v1/workloads?budget=ai", "bob").json()) == 2
    shown = svc.call("GET", f"/v1/workloads/{wid}", "bob").json()
    assert shown["attempts"][0]["placement"] == [["h1", 2, [0, 1]]]
    assert svc.call("GET", "/v1/workloads?status=bogus", "bob").status_code == 422
    assert svc.call("GET", "/v1/workloads/w-999999", "bob").status_code == 404


def walk(svc: Service, url: str, who: str = "bob",
         between: Any = None) -> tuple[list[Any], list[Any]]:
    """Every page of a list, following its ``Link: <...>; rel="next"`` header; ``between()``
    runs after each page that has a next one. Returns the rows and each page's answer."""
    rows: list[Any] = []
    pages = []
    while True:
        r = svc.call("GET", url, who)
        assert r.status_code == 200, r.text
        rows += r.json()
        pages.append(r)
        if "next" not in r.links:
            return rows, pages
        url = r.links["next"]["url"]
        if between is not None:
            between()


def test_workload_pages_give_every_row_once_while_work_is_submitted_between_them(
        svc: Service) -> None:
    """GET /v1/workloads?status=all&limit=3 over 5 workloads, 2 more submitted after each
    of the first two pages: following the Link headers (each page's request with
    ``after`` set to its last id, the other parameters kept) lists all 9 oldest first,
    each exactly once; the last page, and an answer that holds every row (limit 9), has no
    Link header."""
    for _ in range(5):
        submit(svc)
    submitted = 0

    def submit_two() -> None:
        nonlocal submitted
        if submitted < 4:
            submit(svc)
            submit(svc)
            submitted += 2

    rows, pages = walk(svc, "/v1/workloads?status=all&limit=3", between=submit_two)
    ids = [w.id for w in svc.store.list_workloads(statuses=list(Status))]
    assert len(ids) == 9
    assert [w["id"] for w in rows] == ids
    assert pages[0].headers["Link"] == (
        f'</v1/workloads?status=all&limit=3&after={ids[2]}>; rel="next"')
    assert [len(p.json()) for p in pages] == [3, 3, 3]
    assert "Link" not in pages[-1].headers
    whole = svc.call("GET", "/v1/workloads?status=all&limit=9", "bob")
    assert len(whole.json()) == 9 and "Link" not in whole.headers


def test_a_workload_pages_cursor_naming_no_workload_is_refused_naming_after(
        svc: Service) -> None:
    """``after`` must name a workload: an unknown id is a 422 naming the parameter, not an
    empty page."""
    r = svc.call("GET", "/v1/workloads?after=w-999999", "bob")
    assert (r.status_code, r.json()["detail"]) == (
        422, "after: workload w-999999: not found")


def cli(svc: Service, who: str, *args: str) -> Any:
    """A client command, in-process, against ``svc``."""
    from click.testing import CliRunner

    from apportion.cli.main import main

    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens[who],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_queue_and_cancel_read_every_page_of_the_workload_list(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the workload list read 2 rows a page, `apportion queue --json` still shows all 5
    active workloads and `cancel --budget` cancels all 5: the client follows the Link
    headers to the last page."""
    import apportion.cli.jobs

    monkeypatch.setattr(apportion.cli.jobs, "WORKLOADS_PAGE", 2)
    ids = [submit(svc).json()["id"] for _ in range(5)]
    svc.scheduler.step()
    shown = cli(svc, "alice", "queue", "--json")
    assert shown.exit_code == 0, shown.output
    assert sorted(e["id"] for e in json.loads(shown.stdout)) == ids
    cancelled = cli(svc, "alice", "cancel", "--budget", "ai/llm")
    assert cancelled.exit_code == 0, cancelled.output
    assert sorted(re.findall(r"w-\d+", cancelled.stdout)) == ids  # one line each


def test_audit_command_reads_limit_entries_across_pages_and_says_older_ones_are_left_out(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """With GET /v1/audit read 2 entries a page, `apportion audit --limit 3 --json` prints
    the 3 newest and says on stderr that older ones are left out; with a --limit over them
    all it prints every entry and says nothing."""
    import apportion.cli.client

    monkeypatch.setattr(apportion.cli.client, "AUDIT_PAGE", 2)
    for weight in (3, 4, 5):
        svc.call("PATCH", "/v1/budgets/ai/llm", "carol", {"weight": weight})
    every = [a.id for a in svc.store.audit(limit=100_000)]
    newest = cli(svc, "bob", "audit", "--limit", "3", "--json")
    assert newest.exit_code == 0, newest.output
    assert [a["id"] for a in json.loads(newest.stdout)] == every[:3]
    assert newest.stderr == "the 3 newest entries; older ones left out (raise --limit)\n"
    whole = cli(svc, "bob", "audit", "--limit", str(len(every) + 1), "--json")
    assert [a["id"] for a in json.loads(whole.stdout)] == every
    assert whole.stderr == ""


def test_logs_of_an_attempt(svc: Service) -> None:
    """Logs are read from <data_dir>/logs/<workload>/<attempt>.log. Work that has not
    started yet is a 409 (it exists: not the 404 of a workload that does not)."""
    wid = submit(svc).json()["id"]
    pending = svc.call("GET", f"/v1/workloads/{wid}/logs", "alice")
    assert (pending.status_code, pending.json()["detail"]) == (
        409, f"workload {wid}: has not started yet, no logs")
    svc.store.begin_attempt(wid, [("h1", 2, [0, 1])], 1_000_001.0)
    # this service's executor is the memory one: an attempt without a log is told why
    none = svc.call("GET", f"/v1/workloads/{wid}/logs", "alice")
    assert (none.status_code, none.json()["detail"]) == (
        404, f"workload {wid}: attempt 1: no log: the memory executor runs nothing")
    log = svc.config.logs_dir / wid / "1.log"
    log.parent.mkdir(parents=True)
    log.write_text("hello\nworld\n")
    r = svc.call("GET", f"/v1/workloads/{wid}/logs?attempt=1", "alice")
    assert (r.status_code, r.text) == (200, "hello\nworld\n")
    assert svc.call("GET", f"/v1/workloads/{wid}/logs?tail=6", "alice").text == "world\n"
    assert svc.call("GET", f"/v1/workloads/{wid}/logs?attempt=2", "alice").status_code == 404
    assert svc.call("GET", f"/v1/workloads/{wid}/logs", "bob").status_code == 403


def test_a_fifo_or_a_link_in_place_of_a_log_is_refused_at_once(svc: Service) -> None:
    """A fifo put in place of a log (as the owner of the log's directory could with the
    Slurm executor) is answered at once, 404 "log file is not a regular file", instead of
    holding a server thread until someone writes to it; a symbolic link there is still
    refused, said as one (404 "log file is a symbolic link, which is not served", not the
    system's "Too many levels of symbolic links"), nothing of its target served."""
    wid = submit(svc).json()["id"]
    svc.store.begin_attempt(wid, [("h1", 2, [0, 1])], 1_000_001.0)
    log = svc.config.logs_dir / wid / "1.log"
    log.parent.mkdir(parents=True)
    os.mkfifo(log)
    url, auth = f"/v1/workloads/{wid}/logs", {"Authorization": f"Bearer {svc.tokens['alice']}"}
    try:
        r = svc.client.get(url, headers=auth, timeout=5)
    finally:  # a server thread blocked opening the fifo (the defect) is let go
        with contextlib.suppress(OSError):  # ENXIO: no reader waits, nothing to let go
            os.close(os.open(log, os.O_WRONLY | os.O_NONBLOCK))
    assert (r.status_code, r.json()["detail"]) == (
        404, f"workload {wid}: attempt 1: log file is not a regular file")
    log.unlink()
    secret = svc.config.logs_dir / "secret"
    secret.write_text("only the server may read this\n")
    log.symlink_to(secret)
    r = svc.call("GET", url, "alice")
    assert (r.status_code, r.json()["detail"]) == (
        404, f"workload {wid}: attempt 1: log file is a symbolic link, which is not served")
    assert "only the server" not in r.text


def test_logs_are_the_bytes_as_written_so_a_split_character_stays_whole(
        svc: Service) -> None:
    """The logs answer the log's bytes unchanged (``application/octet-stream``): "é" written
    in two halves, read as it grows (from ``X-Log-Offset``), comes back as its two bytes, not
    two U+FFFD; ``tail=2`` and an ``offset`` inside it give its second byte; bytes that are
    not UTF-8 come back as written."""
    wid = submit(svc).json()["id"]
    svc.store.begin_attempt(wid, [("h1", 2, [0, 1])], 1_000_001.0)
    log = svc.config.logs_dir / wid / "1.log"
    log.parent.mkdir(parents=True)
    url = f"/v1/workloads/{wid}/logs"
    log.write_bytes(b"caf\xc3")
    first = svc.call("GET", url, "alice")
    assert first.headers["content-type"] == "application/octet-stream"
    with log.open("ab") as f:
        f.write(b"\xa9\n\xff\xfe")
    rest = svc.call("GET", f"{url}?offset={first.headers['X-Log-Offset']}", "alice")
    assert first.content + rest.content == "café\n".encode() + b"\xff\xfe"
    assert svc.call("GET", f"{url}?tail=4", "alice").content == b"\xa9\n\xff\xfe"
    assert svc.call("GET", f"{url}?offset=4", "alice").content == b"\xa9\n\xff\xfe"


def test_a_log_larger_than_one_answer_comes_in_bounded_pieces_and_is_printed_whole(
        svc: Service) -> None:
    """A log of twice ``LOG_ANSWER_MAX`` and a bit (random bytes) is answered at most
    ``LOG_ANSWER_MAX`` bytes at a time, ``X-Log-Offset`` where to go on and ``X-Log-Size``
    the whole; ``tail`` larger than an answer starts at its place and is bounded too.
    ``apportion logs``, ``--tail`` and ``-f`` (on the ended workload) print it whole, byte
    for byte, asking for it piece by piece."""
    from click.testing import CliRunner

    from apportion.cli.main import main

    wid = submit(svc).json()["id"]
    svc.scheduler.step()
    log = svc.config.logs_dir / wid / "1.log"
    log.parent.mkdir(parents=True)
    data = random.Random(7).randbytes(2 * LOG_ANSWER_MAX + 1000)
    log.write_bytes(data)
    url = f"/v1/workloads/{wid}/logs"
    first = svc.call("GET", url, "alice")
    assert first.content == data[:LOG_ANSWER_MAX]
    assert (first.headers["X-Log-Offset"], first.headers["X-Log-Size"]) == (
        str(LOG_ANSWER_MAX), str(len(data)))
    last = svc.call("GET", f"{url}?offset={2 * LOG_ANSWER_MAX}", "alice")
    assert (last.content, last.headers["X-Log-Offset"]) == (data[-1000:], str(len(data)))
    tail = svc.call("GET", f"{url}?tail={LOG_ANSWER_MAX + 5}", "alice")
    assert tail.content == data[-LOG_ANSWER_MAX - 5:-5]
    assert tail.headers["X-Log-Offset"] == str(len(data) - 5)

    executor = svc.scheduler.executor
    assert isinstance(executor, MemoryExecutor)
    executor.finish(wid)
    svc.scheduler.step()
    assert svc.call("GET", f"/v1/workloads/{wid}", "alice").json()["status"] == "completed"
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["alice"],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    for args, printed in ((["logs", wid], data), (["logs", "-f", wid], data),
                          (["logs", "--tail", str(LOG_ANSWER_MAX + 5), wid],
                           data[-LOG_ANSWER_MAX - 5:])):
        cli = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
        assert (cli.exit_code, cli.stderr) == (0, ""), args
        assert cli.stdout_bytes == printed, args


@pytest.mark.parametrize(("headers", "exit_code", "stdout", "stderr"), [
    ({"X-Log-Attempt": "1", "X-Log-Offset": "9"}, 0, b"whole log", ""),
    ({}, 1, b"", "Error: GET /v1/workloads/w-000005/logs: unexpected reply from the server: "
                 "no X-Log-Attempt header (an older server? upgrade and restart it)\n"),
    ({"X-Log-Attempt": "1", "X-Log-Size": "x"}, 1, b"",
     "Error: GET /v1/workloads/w-000005/logs: unexpected reply from the server: "
     "X-Log-Size: 'x' (an older server? upgrade and restart it)\n"),
])
def test_logs_from_a_server_without_x_log_size_is_printed_whole_or_refused_clearly(
        headers: dict[str, str], exit_code: int, stdout: bytes, stderr: str) -> None:
    """``apportion logs`` against a server that sends no ``X-Log-Size`` (one not restarted
    since it was added, which answers the whole log at once) prints that answer; an answer
    without ``X-Log-Attempt``, or with a size that is no number, is an error naming the
    header and "an older server?", not a KeyError traceback."""
    from click.testing import CliRunner
    from fastapi import FastAPI, Response

    from apportion.cli.main import main

    stub = FastAPI()
    stub.get("/v1/workloads/{wid}/logs")(lambda wid: Response(b"whole log", headers=headers))
    server = ServerThread(stub)
    try:
        cli = CliRunner().invoke(main, ["logs", "5"], catch_exceptions=False, env={
            "APPORTION_URL": server.url, "APPORTION_TOKEN": "t",
            "APPORTION_CLIENT_CONFIG": "/dev/null"})
    finally:
        server.stop()
    assert (cli.exit_code, cli.stdout_bytes, cli.stderr) == (exit_code, stdout, stderr)


OLD_QUEUE = {"now": 1.0, "last_pass_at": 1.0, "pending": [], "running": [], "hosts": [],
             "budgets": [{"path": "ops", "share": 1.0, "charged_gpu_s": 0.0,
                          "usage_ratio": 0.0, "gpus_charged_now": 0.0, "gpus_free_now": 0.0}]}
THIS_CLIENT = f"this client is apportion {__version__} with store schema {newest_revision()}"


@pytest.mark.parametrize(("health", "args", "stderr"), [
    ({"status": "ok", "executor": "local"}, ["queue"],
     "Error: GET /v1/queue: unexpected reply from the server: budgets.0.units_charged_now: "
     "Field required (an older server? upgrade and restart it: it does not say its "
     f"version, {THIS_CLIENT})\n"),
    ({"status": "ok", "executor": "local", "version": "0.0.9", "schema_revision": "0009"},
     ["cancel", "5"],
     "Error: POST /v1/workloads/cancel: unexpected reply from the server: the server has no "
     "such request (HTTP 405) (an older server? upgrade and restart it: it is apportion "
     f"0.0.9 with store schema 0009, {THIS_CLIENT})\n"),
])
def test_a_client_against_an_older_server_says_so_and_names_both_releases(
        health: dict[str, str], args: list[str], stderr: str) -> None:
    """A server of an older release, not restarted since the upgrade: its queue lacks a
    field this client reads, and it has no bulk cancel (a 405). Either is one line naming
    the request, the missing field or the 405, "an older server?", and what the server
    says it is (``GET /v1/health``) beside this client's release (before: pydantic's
    multi-line dump with links, or a bare ``Method Not Allowed (HTTP 405)``)."""
    from click.testing import CliRunner
    from fastapi import FastAPI

    from apportion.cli.main import main

    stub = FastAPI()
    stub.get("/v1/health")(lambda: health)
    stub.get("/v1/queue")(lambda: OLD_QUEUE)
    stub.get("/v1/workloads/{wid}")(lambda wid: {})
    server = ServerThread(stub)
    try:
        cli = CliRunner().invoke(main, args, catch_exceptions=False, env={
            "APPORTION_URL": server.url, "APPORTION_TOKEN": "t",
            "APPORTION_CLIENT_CONFIG": "/dev/null"})
    finally:
        server.stop()
    assert (cli.exit_code, cli.stdout, cli.stderr) == (1, "", stderr)


def test_health_says_the_release_and_the_store_schema(svc: Service) -> None:
    """``GET /v1/health`` says the server's release and its store's schema revision, which
    a client of another release names when it cannot read an answer."""
    health = svc.call("GET", "/v1/health").json()
    assert (health["version"], health["schema_revision"]) == (__version__, newest_revision())


def test_version_says_the_release_and_the_store_schema_it_wants() -> None:
    """``apportion --version``: the release and the store schema revision it migrates to."""
    from click.testing import CliRunner

    from apportion.cli.main import main

    cli = CliRunner().invoke(main, ["--version"], catch_exceptions=False)
    assert (cli.exit_code, cli.stdout) == (
        0, f"apportion {__version__} (store schema {newest_revision()})\n")


def test_cancel_pending(svc: Service) -> None:
    """Cancelling a pending workload ends it at once; twice is 409."""
    wid = submit(svc).json()["id"]
    r = svc.call("POST", f"/v1/workloads/{wid}/cancel", "alice")
    assert r.json()["status"] == "cancelled"
    assert svc.call("POST", f"/v1/workloads/{wid}/cancel", "alice").status_code == 409


def test_cancel_running(svc: Service) -> None:
    """Cancelling a running workload flags it; the scheduler's next pass stops it."""
    wid = submit(svc).json()["id"]
    svc.scheduler.step()
    r = svc.call("POST", f"/v1/workloads/{wid}/cancel", "alice")
    assert (r.json()["status"], r.json()["cancel_requested"]) == ("running", True)
    svc.scheduler.step()
    svc.clock.advance(60)
    svc.scheduler.step()
    assert svc.store.get_workload(wid).status is Status.CANCELLED


# ---- rights ------------------------------------------------------------------------------
def _workload(svc: Service) -> str:
    return str(submit(svc).json()["id"])


# (what, method, url, body, who is allowed, who is refused)
WRITES: list[tuple[str, str, str, Any, str, str]] = [
    ("submit", "POST", "/v1/workloads", JOB, "alice", "bob"),
    ("submit as manager", "POST", "/v1/workloads", JOB, "carol", "bob"),
    ("cancel own", "POST", "/v1/workloads/{wid}/cancel", None, "alice", "bob"),
    ("cancel as manager", "POST", "/v1/workloads/{wid}/cancel", None, "dave", "bob"),
    ("weight below own node", "PATCH", "/v1/budgets/ai/llm", {"weight": 3}, "carol", "dave"),
    ("weight of top node", "PATCH", "/v1/budgets/ai", {"weight": 3}, "root", "carol"),
    ("members", "PUT", "/v1/budgets/ai/llm/members", {"members": ["bob"]}, "dave", "alice"),
    ("members of sibling", "PUT", "/v1/budgets/ai/vision/members", {"members": ["alice"]},
     "carol", "dave"),
    ("managers", "PUT", "/v1/budgets/ai/llm/managers", {"managers": ["carol"]}, "dave", "bob"),
    ("create child", "POST", "/v1/budgets", {"path": "ai/llm/new", "weight": 1}, "dave",
     "alice"),
    ("create top", "POST", "/v1/budgets", {"path": "research", "weight": 1}, "root",
     "carol"),
    ("drain", "POST", "/v1/hosts/h1/drain", {"reason": "fan"}, "root", "carol"),
    ("repair", "POST", "/v1/hosts/h2/repair", {"reason": "ok"}, "root", "carol"),
    ("create user", "POST", "/v1/users", {"name": "eve"}, "root", "carol"),
    ("create token", "POST", "/v1/users/alice/tokens", None, "root", "alice"),
]


def _fingerprint(svc: Service) -> tuple[Any, ...]:
    """Everything a write could change."""
    return (
        [w.as_dict() for w in svc.store.list_workloads(statuses=list(Status))],
        svc.store.budgets(), svc.store.hosts(), svc.store.users(),
        [a.id for a in svc.store.audit(limit=1000)],
    )


def _prepare(svc: Service, url: str) -> str:
    if "{wid}" in url:
        url = url.replace("{wid}", _workload(svc))
    if url.endswith("h2/repair"):  # repair needs a host that is not healthy
        svc.scheduler.set_host_state("h2", HostState.DOWN, "died", "test")
    return url


@pytest.mark.parametrize(("what", "method", "url", "body", "ok", "refused"), WRITES,
                         ids=[w[0] for w in WRITES])
def test_write_without_token_is_401(svc: Service, what: str, method: str, url: str,
                                    body: Any, ok: str, refused: str) -> None:
    """Every write without a token (or with a wrong one) is 401 and changes nothing."""
    url = _prepare(svc, url)
    before = _fingerprint(svc)
    assert svc.call(method, url, None, body).status_code == 401
    svc.tokens["mallory"] = "not-a-token"
    assert svc.call(method, url, "mallory", body).status_code == 401
    assert _fingerprint(svc) == before


@pytest.mark.parametrize(("what", "method", "url", "body", "ok", "refused"), WRITES,
                         ids=[w[0] for w in WRITES])
def test_write_outside_rights_is_403(svc: Service, what: str, method: str, url: str,
                                     body: Any, ok: str, refused: str) -> None:
    """Every write by someone without the right is 403 and changes nothing."""
    url = _prepare(svc, url)
    before = _fingerprint(svc)
    r = svc.call(method, url, refused, body)
    assert r.status_code == 403, r.text
    assert r.json()["detail"].startswith(f"forbidden: {refused} may not")
    assert _fingerprint(svc) == before


@pytest.mark.parametrize(("what", "method", "url", "body", "ok", "refused"), WRITES,
                         ids=[w[0] for w in WRITES])
def test_write_within_rights_succeeds(svc: Service, what: str, method: str, url: str,
                                      body: Any, ok: str, refused: str) -> None:
    """The same write by someone with the right succeeds."""
    url = _prepare(svc, url)
    r = svc.call(method, url, ok, body)
    assert r.status_code in (200, 201), r.text


def test_manager_cannot_set_own_weight(svc: Service) -> None:
    """A node's own weight belongs to its parent's manager: dave manages ai/llm, not ai."""
    assert svc.call("PATCH", "/v1/budgets/ai/llm", "dave", {"weight": 9}).status_code == 403
    assert svc.call("PATCH", "/v1/budgets/ai/llm", "carol", {"weight": 9}).status_code == 200


def test_member_of_ancestor_may_submit(svc: Service) -> None:
    """Members listed on an ancestor may submit to every leaf below it."""
    r = svc.call("PUT", "/v1/budgets/ai/members", "carol", {"members": ["bob"]})
    assert r.status_code == 200
    assert submit(svc, who="bob").status_code == 201


def test_reads_need_a_token(svc: Service) -> None:
    """Reads need a valid token; health does not."""
    for url in ("/v1/workloads", "/v1/budgets", "/v1/budgets/usage", "/v1/hosts", "/v1/audit"):
        assert svc.call("GET", url).status_code == 401, url
        assert svc.call("GET", url, "bob").status_code == 200, url
    assert svc.call("GET", "/v1/health").json()["status"] == "ok"


# ---- budgets, hosts, audit --------------------------------------------------------------
def test_every_budget_change_is_audited(svc: Service) -> None:
    """Weight, members, managers and create each append who, old and new."""
    svc.call("PATCH", "/v1/budgets/ai/llm", "carol", {"weight": 5})
    svc.call("PUT", "/v1/budgets/ai/llm/members", "dave", {"members": ["alice", "bob"]})
    svc.call("PUT", "/v1/budgets/ai/llm/managers", "carol", {"managers": ["carol"]})
    svc.call("POST", "/v1/budgets", "carol", {"path": "ai/robotics", "weight": 2})
    got = svc.call("GET", "/v1/audit?limit=4", "bob").json()
    assert [(a["actor"], a["action"], a["target"], a["old"], a["new"]) for a in got[::-1]] == [
        ("carol", "budget.weight", "ai/llm", {"weight": 2.0}, {"weight": 5.0}),
        ("dave", "budget.members", "ai/llm", {"members": ["alice"]},
         {"members": ["alice", "bob"]}),
        ("carol", "budget.managers", "ai/llm", {"managers": ["dave"]},
         {"managers": ["carol"]}),
        ("carol", "budget.create", "ai/robotics", None,
         {"weight": 2.0, "managers": [], "members": []}),
    ]
    assert all(a["at"] > 0 for a in got)


def test_audit_filters_by_actor_action_family_and_period(svc: Service) -> None:
    """``actor``, ``action`` (one action, or a family: ``budget`` is every ``budget.*``) and
    ``from``/``to`` (at or after / before, as report times are written) narrow the audit,
    over the API and in ``apportion audit``; a name nobody has and no entry has is a 422
    with the closest, a bad time names the parameter."""
    svc.store.clock = svc.clock.now  # entries dated on the test's clock, as in a server
    svc.call("PATCH", "/v1/budgets/ai/llm", "carol", {"weight": 5})
    svc.clock.advance(3600)
    middle = svc.clock.now()
    svc.call("PUT", "/v1/budgets/ai/llm/members", "dave", {"members": ["alice", "bob"]})
    svc.clock.advance(3600)
    svc.call("POST", "/v1/budgets", "carol", {"path": "ai/robotics", "weight": 2})

    def got(query: str) -> list[tuple[str, str]]:
        r = svc.call("GET", f"/v1/audit?{query}", "bob")
        assert r.status_code == 200, r.text
        return [(a["actor"], a["action"]) for a in r.json()][::-1]

    assert got("actor=carol") == [("carol", "budget.weight"), ("carol", "budget.create")]
    assert got("action=budget.members") == [("dave", "budget.members")]
    assert got("action=budget&actor=dave") == [("dave", "budget.members")]
    assert got(f"from={middle}&to={middle + 3600}") == [("dave", "budget.members")]
    assert got("actor=alice") == []  # a user with no entries: none
    for query, detail in [
        ("actor=carl", "actor: no user and no entry by 'carl'; did you mean 'carol'?"),
        ("action=budget.wieght", "action: no entry of 'budget.wieght'; did you mean "
                                 "'budget.weight' or 'budget.create'?"),
        ("action=budg", "action: no entry of 'budg'; did you mean 'budget'?"),
        ("from=soon", "from: must be a date (2026-11-01), a date and time "
                      "(2026-11-01T08:00), 'now' or a duration ago (30d), got 'soon'"),
    ]:
        r = svc.call("GET", f"/v1/audit?{query}", "bob")
        assert (r.status_code, r.json()["detail"]) == (422, detail)
    listed = cli(svc, "bob", "audit", "--actor", "carol", "--action", "budget",
                 "--from", str(middle), "--json")
    assert listed.exit_code == 0, listed.output
    assert [a["action"] for a in json.loads(listed.stdout)] == ["budget.create"]


def test_audit_command_names_an_unknown_actor_or_action_by_its_flag(svc: Service) -> None:
    """``apportion audit --actor carl`` and ``--action budget.wieght`` are refused (exit 2)
    naming the flag as typed, ``--actor:`` and ``--action:``, with the closest names (they
    were named as the API's query fields, ``actor:`` and ``action:``)."""
    svc.call("PATCH", "/v1/budgets/ai/llm", "carol", {"weight": 3})
    for args, said in [
        (("--actor", "carl"), "Error: --actor: no user and no entry by 'carl'; did you mean "
                              "'carol'? (HTTP 422)\n"),
        (("--action", "budget.wieght"), "Error: --action: no entry of 'budget.wieght'; did "
                                        "you mean 'budget.weight'"),
    ]:
        r = cli(svc, "bob", "audit", *args)
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith(said), r.stderr


def test_audit_command_names_a_target_that_is_nothing_by_its_flag(svc: Service) -> None:
    """``audit --target ai/lm`` (no budget, host, user or workload of that name, no entry
    about it) is refused (exit 2) naming ``--target`` with the closest names, and a short
    workload id that is nothing either names both readings (before: an empty table, as for
    a target nothing happened to); a workload with no entries says "no entries"."""
    for typed, said in [
        ("ai/lm", "Error: --target: no budget, host, user or workload 'ai/lm' and no entry "
                  "about it; did you mean 'ai/llm'?"),
        ("999", "Error: --target: no budget, host, user or workload '999' (or 'w-000999') "
                "and no entry about it"),
    ]:
        r = cli(svc, "bob", "audit", "--target", typed)
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith(said), r.stderr
    wid = submit(svc).json()["id"]  # pending: nothing audited about it yet
    r = cli(svc, "bob", "audit", "--target", wid)
    assert (r.exit_code, r.stdout) == (0, "no entries\n"), r.output


def test_audit_with_no_entries_says_so_instead_of_an_empty_table_and_json_stays_a_list(
        svc: Service) -> None:
    """``audit --from`` a period with no entries prints "no entries" on stdout (as
    ``queue`` prints "no active workloads"), not a table's bare header line, and says the
    period searched on stderr; ``--json`` prints an empty JSON list, still one document."""
    r = cli(svc, "bob", "audit", "--from", "2099-01-01")
    assert (r.exit_code, r.stdout) == (0, "no entries\n"), r.output
    assert r.stderr.startswith("no entries at or after "), r.stderr
    r = cli(svc, "bob", "audit", "--from", "2099-01-01", "--json")
    assert (r.exit_code, json.loads(r.stdout)) == (0, [])


@pytest.mark.parametrize(("who", "method", "url", "body"), [
    ("carol", "PATCH", "/v1/budgets/ai/llm", {"weight": 5}),
    ("dave", "PUT", "/v1/budgets/ai/llm/members", {"members": ["bob", "alice"]}),
    ("carol", "PUT", "/v1/budgets/ai/llm/managers", {"managers": ["carol"]}),
])
def test_a_budget_change_answers_the_node_as_listed(
        svc: Service, who: str, method: str, url: str, body: dict[str, Any]) -> None:
    """A new weight, members or managers are answered with the node as ``GET /v1/budgets``
    lists it after the change (parent, share, leaf, managers, members), as docs/api.md
    says, not only the path and the field changed."""
    r = svc.call(method, url, who, body)
    assert r.status_code == 200, r.text
    listed = {b["path"]: b for b in svc.call("GET", "/v1/budgets", "bob").json()}
    assert r.json() == listed["ai/llm"]


def test_a_change_to_what_it_is_answers_the_node_and_appends_no_audit_entry(
        svc: Service) -> None:
    """A weight, members or managers set to what the node has, and a second cancel of
    running work, answer 200 (the node, the workload) and append no audit entry."""
    wid = submit(svc).json()["id"]
    svc.scheduler.step()
    assert svc.call("POST", f"/v1/workloads/{wid}/cancel", "alice").status_code == 200
    before = svc.call("GET", "/v1/audit", "root").json()
    listed = {b["path"]: b for b in svc.call("GET", "/v1/budgets", "bob").json()}
    for who, method, url, body in [
        ("carol", "PATCH", "/v1/budgets/ai/llm", {"weight": 2}),
        ("dave", "PUT", "/v1/budgets/ai/llm/members", {"members": ["alice"]}),
        ("carol", "PUT", "/v1/budgets/ai/llm/managers", {"managers": ["dave"]}),
    ]:
        r = svc.call(method, url, who, body)
        assert (r.status_code, r.json()) == (200, listed["ai/llm"]), url
    r = svc.call("POST", f"/v1/workloads/{wid}/cancel", "alice")
    assert r.status_code == 200 and r.json()["cancel_requested"] is True
    assert svc.call("GET", "/v1/audit", "root").json() == before


def test_budget_tree_with_shares(svc: Service) -> None:
    """GET /budgets gives every node with its share of the cluster."""
    tree = {b["path"]: b for b in svc.call("GET", "/v1/budgets", "bob").json()}
    assert tree["ai/llm"]["share"] == pytest.approx(1 / 3)
    assert tree["ai"]["managers"] == ["carol"] and not tree["ai"]["leaf"]


def test_budget_bad_input(svc: Service) -> None:
    """Bad weight is 422 naming weight; unknown node 404; bad path 422; nothing changes."""
    before = _fingerprint(svc)
    assert "weight" in svc.call("PATCH", "/v1/budgets/ai/llm", "root",
                                {"weight": -1}).json()["detail"]
    assert svc.call("PATCH", "/v1/budgets/nope", "root", {"weight": 1}).status_code == 404
    r = svc.call("POST", "/v1/budgets", "root", {"path": "ai//x", "weight": 1})
    assert r.status_code == 422 and r.json()["detail"].startswith("path: ")
    assert _fingerprint(svc) == before


def test_budgets_usage_names_each_node_budget_as_the_usage_report_does(svc: Service) -> None:
    """GET /v1/budgets/usage (what ``budgets usage --json`` prints) names each node
    ``budget``, as /v1/reports/usage's rows do, and still ``path`` (the same value) for
    clients that read that name."""
    submit(svc)
    svc.scheduler.step()
    nodes = svc.call("GET", "/v1/budgets/usage", "bob").json()["budgets"]
    report = svc.call("GET", "/v1/reports/usage?from=1d", "root").json()
    assert [b["budget"] for b in nodes] == [b["path"] for b in nodes]
    assert {b["budget"] for b in nodes} <= {r["budget"] for r in report["rows"]}


def test_usage_from_attempts(svc: Service) -> None:
    """Usage charges allocated attempts to the leaf and its ancestors."""
    submit(svc)
    svc.scheduler.step()
    svc.clock.advance(3600)
    submit(svc, who="bob", budget="ai/vision")  # an event at the new time moves the state on
    svc.scheduler.step()
    got = svc.call("GET", "/v1/budgets/usage", "bob").json()
    assert got["source"] == "scheduler"
    u = {b["path"]: b for b in got["budgets"]}
    assert u["ai/llm"]["charged_gpu_hours"] == pytest.approx(2.0)
    assert u["ai"]["charged_gpu_hours"] == pytest.approx(2.0)
    assert u["ops"]["charged_gpu_hours"] == 0.0
    assert u["ai/llm"]["usage_ratio"] > 0
    # one reply, one reading: nothing is billed, so the units are the GPU-hours, and the
    # ratio is the charged units over the share of the capacity the reply gives (that was
    # the healthy GPUs now times the window, not the ledger's, and disagreed)
    assert got["billed"] is False
    for b in got["budgets"]:
        assert b["charged_units"] == b["charged_gpu_hours"]
        assert b["usage_ratio"] == pytest.approx(
            b["charged_units"] / (b["share"] * got["capacity_gpu_hours"]), rel=1e-12)


def test_usage_from_store_before_first_pass(svc: Service) -> None:
    """Before the scheduler's first pass, usage is computed from the store's attempts."""
    wid = submit(svc).json()["id"]
    svc.store.begin_attempt(wid, [("h1", 2, [0, 1])], svc.clock.now())
    svc.clock.advance(1800)
    got = svc.call("GET", "/v1/budgets/usage", "bob").json()
    assert got["source"] == "store"
    u = {b["path"]: b for b in got["budgets"]}
    assert u["ai"]["charged_gpu_hours"] == pytest.approx(1.0)


def test_policy_queue_view(svc: Service) -> None:
    """GET /queue shows pending work in policy order with its wait reason."""
    for _ in range(3):
        submit(svc, gpus=8)
    svc.scheduler.step()
    view = svc.call("GET", "/v1/queue", "bob").json()
    assert len(view["running"]) == 2
    assert view["pending"][0]["wait_reason"] == "no_capacity"


def test_queue_json_names_the_wait_reason_as_the_api_does(svc: Service) -> None:
    """``apportion queue --json``: each row is the workload with the /v1/queue row's fields
    under the API's names and values (``wait_reason: "no_capacity"``, ``hold``,
    ``stop_reason``), not the table's text (``reason: "no capacity"``), and one status
    (``status``, no ``state`` beside it)."""
    for _ in range(3):
        submit(svc, gpus=8)
    svc.scheduler.step()
    view = svc.call("GET", "/v1/queue", "bob").json()
    shown = cli(svc, "alice", "queue", "--json")
    assert shown.exit_code == 0, shown.output
    rows = {e["id"]: e for e in json.loads(shown.stdout)}
    [waiting] = view["pending"]
    assert rows[waiting["id"]]["wait_reason"] == waiting["wait_reason"] == "no_capacity"
    for r in view["running"]:
        assert rows[r["id"]]["stop_reason"] == r["stop_reason"]
        assert (rows[r["id"]]["status"], rows[r["id"]]["wait_reason"]) == ("running", None)
    for e in rows.values():
        assert "reason" not in e and "state" not in e and "hold" in e


def test_queue_is_503_before_the_first_pass_not_an_empty_queue(svc: Service) -> None:
    """Before the scheduler's first pass GET /v1/queue answers 503 with the dashboard's
    message, and ``apportion queue`` prints it and exits 1 (it said "no active workloads"
    with work pending); after the pass, the queue."""
    from click.testing import CliRunner

    from apportion.cli.main import main

    wid = submit(svc).json()["id"]
    r = svc.call("GET", "/v1/queue", "bob")
    assert (r.status_code, r.json()["detail"]) == (
        503, "scheduler: not started yet, retry in a moment")
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["bob"],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    cli = CliRunner().invoke(main, ["queue"], env=env, catch_exceptions=False)
    assert cli.exit_code == 50  # 503: the server cannot serve it yet
    assert "scheduler: not started yet, retry in a moment" in cli.stderr
    assert "no active workloads" not in cli.output
    svc.scheduler.step()
    assert [w["id"] for w in svc.call("GET", "/v1/queue", "bob").json()["running"]] == [wid]


def test_audit_pages_give_every_entry_once_while_entries_are_added_between_them(
        svc: Service) -> None:
    """GET /v1/audit?limit=2, newest first, with a weight change audited after each page:
    following the Link headers (``before`` set to each page's last id) lists every entry
    there was at the first page exactly once, newest first, none of the later ones (they
    are newer than the first page); the last page has no Link header."""
    weight = 2

    def change() -> None:
        nonlocal weight
        weight += 1
        assert svc.call("PATCH", "/v1/budgets/ai/llm", "carol",
                        {"weight": weight}).status_code == 200

    for _ in range(3):
        change()
    there = [a.id for a in svc.store.audit(limit=100_000)]
    rows, pages = walk(svc, "/v1/audit?limit=2", between=change)
    assert [a["id"] for a in rows] == there
    assert pages[0].headers["Link"] == f'</v1/audit?limit=2&before={there[1]}>; rel="next"'
    assert "Link" not in pages[-1].headers
    assert len(svc.store.audit(limit=100_000)) == len(there) + len(pages) - 1


@pytest.mark.parametrize("query", ["from=2026-12-06&to=2026-12-05",
                                   "from=2026-12-06&to=2026-12-06"])
def test_an_audit_period_that_ends_before_it_starts_is_refused_naming_from(
        svc: Service, query: str) -> None:
    """GET /v1/audit with ``from`` not before ``to`` is a 422 saying so, as
    /v1/reports/usage answers the same period (it answered 200 and an empty list)."""
    r = svc.call("GET", f"/v1/audit?{query}", "bob")
    start, end = (q.split("=")[1] for q in query.split("&"))
    assert (r.status_code, r.json()["detail"]) == (
        422, f"from: must be before to ({start} is not before {end})")
    assert svc.call("GET", f"/v1/reports/usage?{query}", "root").status_code == 422


@pytest.mark.parametrize("query", ["from=2026-12-06&to=2026-12-05",
                                   "from=2026-12-06&to=2026-12-06", "from=1d&to=2d"])
def test_a_usage_report_period_that_ends_before_it_starts_names_the_dates_as_typed(
        svc: Service, query: str) -> None:
    """GET /v1/reports/usage with ``from`` not before ``to`` is a 422 giving both as sent,
    ``from: must be before to (2026-12-06 is not before 2026-12-05)``, as GET /v1/audit
    refuses the same period (it said only 'from: must be before to (and before now)')."""
    r = svc.call("GET", f"/v1/reports/usage?{query}", "root")
    start, end = (q.split("=")[1] for q in query.split("&"))
    assert (r.status_code, r.json()["detail"]) == (
        422, f"from: must be before to ({start} is not before {end})")


def test_a_usage_report_from_after_now_says_the_servers_time(svc: Service) -> None:
    """A period starting after the server's now (its end cut to now) is a 422 naming
    ``from`` with the start and the server's time in UTC."""
    r = svc.call("GET", "/v1/reports/usage?from=1970-01-13&to=1970-01-14", "root")
    assert (r.status_code, r.json()["detail"]) == (
        422, "from: must be before now (1970-01-13 00:00:00+00:00 is not before the server's "
             "time, 1970-01-12 13:46:40+00:00)")


def test_a_usage_report_to_after_now_is_cut_to_now_and_says_so(svc: Service) -> None:
    """A report whose ``to`` is after the server's now still ends now (the JSON's ``to``),
    and its notes (``approximations``, the html page's "How the figures are made") say the
    period was cut and where it ends; ``report usage --to`` a future date says so on
    stderr naming the date as typed and the real end, for the table and the csv alike;
    ``--to now`` (the default) says nothing."""
    from click.testing import CliRunner

    from apportion.cli.main import main

    r = svc.call("GET", "/v1/reports/usage?from=1970-01-10&to=1970-01-20", "root")
    assert r.status_code == 200, r.text
    assert r.json()["to"] == 1_000_000.0
    assert r.json()["approximations"][0] == (
        "the period asked for ends after now (1970-01-20 00:00:00+00:00): it ends now, at "
        "1970-01-12 13:46:40+00:00; work still running counts its run up to then")
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["root"],
           "APPORTION_CLIENT_CONFIG": "/dev/null", "TZ": "UTC"}
    run = CliRunner().invoke(main, ["report", "usage", "--from", "1970-01-10", "--to",
                                    "1970-01-20"], env=env, catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert run.stderr == ("note: --to 1970-01-20 is after now: the report ends now, at "
                          "1970-01-12 13:46:40+00:00 (work still running counts its run up "
                          "to then)\n")
    far = "2999-01-01"
    csv = CliRunner().invoke(main, ["report", "usage", "--from", "1970-01-10", "--to", far,
                                    "--format", "csv"], env=env, catch_exceptions=False)
    assert csv.stderr.startswith(f"note: --to {far} is after now: the report ends now, at ")
    plain = CliRunner().invoke(main, ["report", "usage", "--from", "1970-01-10"], env=env,
                               catch_exceptions=False)
    assert (plain.exit_code, plain.stderr) == (0, "")


@pytest.mark.parametrize(("start", "end"), [("1d", "2d"), ("2026-12-06", "2026-12-05")])
def test_audit_command_refuses_a_period_that_ends_before_it_starts_naming_the_flags_as_typed(
        svc: Service, start: str, end: str) -> None:
    """``apportion audit --from 1d --to 2d`` is refused (exit 2) as ``report usage``
    refuses the same period, naming the flags and their values as typed: ``Error: --from:
    1d is not before --to (2d)`` (it said the API's ``from: must be before to
    (1796565957.0283341 is not before 1796479557.0283341)``, epoch seconds the user never
    typed)."""
    r = cli(svc, "bob", "audit", "--from", start, "--to", end)
    assert r.exit_code == 2, r.output
    assert r.stderr == f"Error: --from: {start} is not before --to ({end})\n"


@pytest.mark.parametrize(("args", "said"), [
    (("hosts", "drain", "h1", "--reason", "x" * 1100),
     "Error: --reason: String should have at most 1024 characters"),
    (("hosts", "repair", "h1", "--reason", "x" * 1100),
     "Error: --reason: String should have at most 1024 characters"),
    (("users", "add", "erin", "--unix-user", "bad name"),
     "Error: --unix-user: 'bad name' is not a Unix account name"),
    (("users", "set", "bob", "--unix-user", "bad name"),
     "Error: --unix-user: 'bad name' is not a Unix account name"),
    (("tokens", "create", "bob", "--label", "x" * 300),
     "Error: --label: String should have at most 255 characters"),
])
def test_admin_commands_name_a_refused_value_by_its_flag(
        svc: Service, args: tuple[str, ...], said: str) -> None:
    """``hosts drain|repair --reason``, ``users add|set --unix-user`` and ``tokens create
    --label`` refused by the server (exit 2) name the flag as typed, ``--reason:``, not the
    API's field (``reason:``, ``unix_user:``, ``label:``)."""
    r = cli(svc, "root", *args)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(said), r.stderr


def test_an_audit_cursor_past_any_id_is_refused_naming_before(svc: Service) -> None:
    """``before`` over the largest id the audit's 32-bit column holds is a 422 naming it
    (PostgreSQL could not compare it with the column: a 500)."""
    r = svc.call("GET", f"/v1/audit?before={2**31}", "bob")
    assert (r.status_code, r.json()["detail"]) == (
        422, "before: Input should be less than or equal to 2147483647")


def test_drain_and_repair(svc: Service) -> None:
    """Drain goes through the scheduler and is audited; repairing a healthy host, or
    draining a host that is down (it takes no work already), answers it as it is, changes
    nothing and audits nothing."""
    r = svc.call("POST", "/v1/hosts/h1/drain", "root", {"reason": "ECC errors"})
    assert (r.json()["state"], r.json()["reason"]) == ("draining", "ECC errors")
    assert svc.store.audit(limit=1)[0].new == {"state": "draining", "reason": "ECC errors"}
    # drained again without a reason: the reason stays (it was wiped), nothing audited;
    # with a new reason, that one is recorded
    again = svc.call("POST", "/v1/hosts/h1/drain", "root")
    assert (again.json()["state"], again.json()["reason"]) == ("draining", "ECC errors")
    assert svc.store.audit(limit=1)[0].new == {"state": "draining", "reason": "ECC errors"}
    new = svc.call("POST", "/v1/hosts/h1/drain", "root", {"reason": "ECC errors, fan"})
    assert new.json()["reason"] == "ECC errors, fan"
    assert svc.call("POST", "/v1/hosts/h1/repair", "root").json()["state"] == "healthy"
    audited, since = len(svc.store.audit(limit=1000)), svc.store.get_host("h1").changed_at
    again = svc.call("POST", "/v1/hosts/h1/repair", "root", {"reason": "twice"})
    assert (again.status_code, again.json()["state"]) == (200, "healthy")
    # already healthy: neither the state's time nor the audit log moves
    assert (len(svc.store.audit(limit=1000)), svc.store.get_host("h1").changed_at) == (
        audited, since)
    svc.scheduler.set_host_state("h1", HostState.DOWN, "died", "test")
    audited = len(svc.store.audit(limit=1000))
    down = svc.call("POST", "/v1/hosts/h1/drain", "root", {"reason": "again"})
    assert (down.status_code, down.json()["state"], down.json()["reason"]) == (
        200, "down", "died")
    assert len(svc.store.audit(limit=1000)) == audited
    assert svc.call("POST", "/v1/hosts/nope/drain", "root").status_code == 404
    typo = svc.call("POST", "/v1/hosts/h1x/drain", "root")  # a typo of h1
    assert (typo.status_code, typo.json()["detail"]) == (
        404, "host h1x: not found; did you mean h1?")
    hosts = svc.call("GET", "/v1/hosts", "bob").json()
    assert [h["name"] for h in hosts] == ["h1", "h2"]


def test_drain_again_while_a_pass_empties_the_host_to_repair_is_not_refused(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """A drain with a new reason of a draining host whose work has just ended, with a pass
    trying to run between the route's read of the host and its change (the pass that takes
    the emptied host to repair): the pass waits for the change, the drain is answered 200
    with its new reason recorded (never 409 'cannot go from repair to draining'), and the
    pass then takes the host to repair keeping that reason."""
    wid = submit(svc).json()["id"]
    svc.scheduler.step()
    attempt = svc.store.get_workload(wid).attempt
    assert attempt is not None
    host = attempt.placement[0][0]
    assert svc.call("POST", f"/v1/hosts/{host}/drain", "root",
                    {"reason": "ECC"}).status_code == 200
    executor = svc.scheduler.executor
    assert isinstance(executor, MemoryExecutor)
    executor.finish(wid)  # the host is empty: the next pass takes it to repair
    read, ran_between = svc.store.get_host, []

    def pass_after_the_read(name: str) -> Any:
        row = read(name)
        if not ran_between:  # once: the route's read of the host

            def try_a_pass() -> None:  # a pass of the scheduler's thread, if it may run now
                if svc.scheduler.lock.acquire(blocking=False):
                    try:
                        svc.scheduler.step()
                    finally:
                        svc.scheduler.lock.release()
                    ran_between.append(True)
                else:
                    ran_between.append(False)

            passer = threading.Thread(target=try_a_pass)
            passer.start()
            passer.join()
        return row

    monkeypatch.setattr(svc.store, "get_host", pass_after_the_read)
    r = svc.call("POST", f"/v1/hosts/{host}/drain", "root", {"reason": "ECC, fan"})
    monkeypatch.undo()
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["reason"]) == ("draining", "ECC, fan")
    assert ran_between == [False]  # the pass had to wait for the change
    svc.scheduler.step()
    h = svc.store.get_host(host)
    assert (h.state, h.reason) == (HostState.REPAIR, "ECC, fan (drained: empty)")


def test_admin_creates_user_and_token(svc: Service) -> None:
    """A token made through the API works; the store keeps only its hash."""
    svc.call("POST", "/v1/users", "root", {"name": "eve"})
    token = svc.call("POST", "/v1/users/eve/tokens", "root").json()["token"]
    svc.tokens["eve"] = token
    assert svc.call("GET", "/v1/hosts", "eve").status_code == 200
    assert svc.store.user_for_token(token) is None  # looked up by digest only


def test_a_user_name_that_breaks_the_rule_is_refused_in_words(svc: Service) -> None:
    """``POST /v1/users`` with ``Alice.Smith`` (and a budget's members with it) is refused
    with the config loader's words for the rule, not pydantic's regex ("String should
    match pattern '^[a-z_][a-z0-9_-]{0,31}$'"); so is a name too long."""
    rule = ("is not a user name: a lower-case letter or '_', then up to 31 lower-case "
            "letters, digits, '_' or '-'")
    r = svc.call("POST", "/v1/users", "root", {"name": "Alice.Smith"})
    assert (r.status_code, r.json()["detail"]) == (422, f"name: 'Alice.Smith' {rule}")
    r = svc.call("POST", "/v1/users", "root", {"name": "a" * 33})
    assert (r.status_code, r.json()["detail"]) == (422, f"name: {'a' * 33!r} {rule}")
    r = svc.call("POST", "/v1/budgets", "root", {"path": "x", "members": ["Alice.Smith"]})
    assert (r.status_code, r.json()["detail"]) == (422, f"members.0: 'Alice.Smith' {rule}")


def test_tokens_written_0600(tmp_path: Path) -> None:
    """Seeding writes one token file per user, readable by the owner only."""
    s = make_service(tmp_path)
    try:
        path = s.config.tokens_dir / "alice"
        assert path.read_text().strip() == s.tokens["alice"]
        assert path.stat().st_mode & 0o777 == 0o600
        assert s.config.tokens_dir.stat().st_mode & 0o777 == 0o700
    finally:
        close_service(s)


def test_openapi_served(svc: Service) -> None:
    """The OpenAPI schema lists the routes."""
    paths = json.loads(svc.client.get("/openapi.json").text)["paths"]
    assert "/v1/workloads" in paths and "/v1/hosts/{name}/drain" in paths


@pytest.mark.parametrize("backend", BACKENDS)
def test_submit_and_cancel_on_each_database(tmp_path: Path, backend: str) -> None:
    """Submit, queue and cancel work the same on SQLite and PostgreSQL."""
    s = make_service(tmp_path, backend)
    try:
        wid = submit(s).json()["id"]
        assert [w["id"] for w in s.call("GET", "/v1/workloads", "alice").json()] == [wid]
        assert s.call("POST", f"/v1/workloads/{wid}/cancel", "dave").status_code == 200
    finally:
        close_service(s)


@pytest.mark.parametrize(("body", "where"), [
    ({"since": "1d", "sets": {}}, "sets: Extra inputs are not permitted"),
    ({"since": True}, 'since: must be a number of seconds or a duration such as "30m", got a '
                      "boolean"),
    ({"since": "1d", "until": "now"}, "until: Input should be a valid number"),
    ({"since": "1d", "set_weight": {"ai/llm": "2"}}, "set_weight.ai/llm: "),
    ({"since": "1d", "set_weight": {"ai/llm": -1}}, "set_weight.ai/llm: Input should be "
                                                    "greater than or equal to"),
    ({"since": "1d", "set_weight": {"ai/../x": 1}},
     "set_weight: key 'ai/../x': segment 2 ('..'): must not be '.' or '..'"),
    ({"since": "1d", "set": {"lookback": [3]}}, "set.lookback"),
])
def test_whatif_body_is_strict(svc: Service, body: dict[str, Any], where: str) -> None:
    """``POST /v1/whatif`` takes its body as strictly as the other routes: an unknown field,
    a value of the wrong type (true for a duration, "2" for a weight), a weight out of its
    bounds or a malformed budget path is a 422 naming the field, before any replay."""
    r = svc.call("POST", "/v1/whatif", "root", body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(where), r.json()["detail"]


@pytest.mark.parametrize(("route", "body", "detail"), [
    ("/v1/whatif", {"since": -3}, "since: must be a number of seconds >= 0, got -3"),
    ("/v1/whatif", {"since": None},
     'since: must be a number of seconds or a duration such as "30m", got null'),
    ("/v1/whatif", {"since": ""}, "since: a duration must be 1 to 64 characters, got 0"),
    ("/v1/workloads", {**JOB, "min_runtime": -3},
     "min_runtime: must be a number of seconds >= 0, got -3"),
    ("/v1/workloads", {**JOB, "time_limit": [1]},
     'time_limit: must be a number of seconds or a duration such as "30m", got a list'),
])
def test_a_bad_duration_is_one_message_naming_its_field(
        svc: Service, route: str, body: dict[str, Any], detail: str) -> None:
    """A duration (seconds, or a text like "30m") that is neither: a 422 with one message
    naming the field, not pydantic's reason per form ('since.constrained-float: ...;
    since.constrained-str: ...')."""
    r = svc.call("POST", route, "root", body)
    assert (r.status_code, r.json()["detail"]) == (422, detail)


@pytest.mark.parametrize(("route", "body", "detail"), [
    ("/v1/workloads", {**JOB, "time_limit": 1e308},
     "time_limit: 1e+308 s is over the cap of 3650 d on any duration"),
    ("/v1/workloads", {**JOB, "checkpoint_interval": 1e308},
     "checkpoint_interval: 1e+308 s is over the cap of 3650 d on any duration"),
    ("/v1/workloads", {**JOB, "min_runtime": 1e308},
     "min_runtime: 1e+308 s is over the cap of 3650 d on any duration"),
    ("/v1/workloads", {**JOB, "time_limit": "99999999999d"},
     "time_limit: '99999999999d' is over the cap of 3650 d on any duration"),
    ("/v1/workloads", {**JOB, "time_limit": 3650 * 86400 + 1},
     "time_limit: 315360001 s is over the cap of 3650 d on any duration"),
    ("/v1/whatif", {"since": 1e308}, "since: 1e+308 s is over the cap of 3650 d on any duration"),
    ("/v1/whatif", {"since": "1d", "set": {"lookback": "1e308"}},
     "set: lookback: '1e308' is over the cap of 3650 d on any duration"),
])
def test_a_duration_over_ten_years_is_refused_quoting_it_as_sent(
        svc: Service, route: str, body: dict[str, Any], detail: str) -> None:
    """Every duration of a body (and a what-if setting's) is at most 3650 d: a longer one
    is a 422 that quotes the value as sent (``1e+308 s``, ``'99999999999d'``), not written
    out in days with 300 digits, and nothing is stored (a time limit of 1e308 s was stored
    when no policy.max_time_limit was set)."""
    r = svc.call("POST", route, "root", body)
    assert (r.status_code, r.json()["detail"]) == (422, detail)
    assert svc.store.list_workloads() == []


def test_a_duration_of_ten_years_is_taken(svc: Service) -> None:
    """The cap is inclusive: a time limit of exactly 3650 d is stored as sent."""
    r = svc.call("POST", "/v1/workloads", "alice", {**JOB, "time_limit": "3650d"})
    assert r.status_code == 201 and r.json()["time_limit"] == 3650 * 86400


# every request body, with the route that takes it and a body it accepts (the what-if
# accepts it, and then finds no history to replay: 422 "period: ...")
BODY_ROUTES: dict[type[Any], tuple[str, str, dict[str, Any]]] = {
    bodies.SubmitBody: ("POST", "/v1/workloads", JOB),
    bodies.CancelBody: ("POST", "/v1/workloads/cancel", {"user": "alice", "budget": "ai/llm"}),
    bodies.WeightBody: ("PATCH", "/v1/budgets/ai/llm", {"weight": 1}),
    bodies.CreateBudgetBody: ("POST", "/v1/budgets", {"path": "ops/new"}),
    bodies.MembersBody: ("PUT", "/v1/budgets/ai/llm/members", {"members": ["alice"]}),
    bodies.ManagersBody: ("PUT", "/v1/budgets/ai/llm/managers", {"managers": ["dave"]}),
    bodies.HostBody: ("POST", "/v1/hosts/h1/drain", {}),
    bodies.NoBody: ("POST", "/v1/tokens/t-000000000000/revoke", {}),
    bodies.UserBody: ("POST", "/v1/users", {"name": "zed"}),
    bodies.UserChangeBody: ("PATCH", "/v1/users/alice", {}),
    bodies.TokenBody: ("POST", "/v1/users/alice/tokens", {}),
    bodies.WhatifBody: ("POST", "/v1/whatif", {"since": "1d"}),
}
# one value of each JSON type, and the strings and lists most fields refuse
WRONG_VALUES: list[Any] = [True, 5, -1.5, 1e308, "", "a b", "a\x00", None, [], [5], [""],
                           {}, {"k": [5]}]
PYDANTIC_INTERNALS = ("function-after", "function-before", "constrained-", "literal[",
                      "list[", "0x", "functools", "[key]")


def test_every_body_of_the_api_is_in_the_table() -> None:
    """BODY_ROUTES covers every request body of bodies.py, so that the test below checks
    every field of every body."""
    assert set(BODY_ROUTES) == set(bodies._Body.__subclasses__())


@pytest.mark.parametrize("model", BODY_ROUTES, ids=lambda m: m.__name__)
def test_a_wrong_value_in_any_field_is_refused_naming_the_field(
        svc: Service, model: type[Any]) -> None:
    """Every field of the body, set to a value of each JSON type (and to an empty, a
    spaced, a NUL-holding string, lists and objects): a value refused with 422 gets a detail
    that starts with the field as sent (``gpu_kind: ``, ``nodelist.0: ``, ``set: key ...``)
    and names it once, and none holds pydantic's internal names of a union's forms or of
    its validators (``function-after[...]``, ``constrained-str``, ``literal['']``, memory
    addresses); no value gets a 5xx. Each field refuses at least one of the values."""
    method, url, good = BODY_ROUTES[model]
    for field_ in model.model_fields:
        refused = 0
        for value in WRONG_VALUES:
            r = svc.call(method, url, "root", {**good, field_: value})
            assert r.status_code < 500, (field_, value, r.text)
            if r.status_code != 422 or r.json()["detail"].startswith("period: "):
                continue
            refused += 1
            detail = r.json()["detail"]
            assert detail.startswith((f"{field_}:", f"{field_}.")), (field_, value, detail)
            assert not re.search(rf"; {field_}[.:]", detail), (field_, value, detail)
            assert not any(x in detail for x in PYDANTIC_INTERNALS), (field_, value, detail)
        assert refused, field_


@pytest.mark.parametrize(("route", "body", "detail"), [
    ("/v1/workloads", {**JOB, "gpu_kind": 5},
     'gpu_kind: must be a list of GPU kinds or a text such as "H100,B200", got a number'),
    ("/v1/workloads", {**JOB, "gpu_kind": "a\x00"}, "gpu_kind: must not contain NUL characters"),
    ("/v1/workloads", {**JOB, "gpu_kind": ["H100", ""]},
     "gpu_kind.1: String should have at least 1 character"),
    ("/v1/workloads", {**JOB, "nodelist": [""]},
     "nodelist.0: String should have at least 1 character"),
    ("/v1/workloads", {**JOB, "cluster": "c" * 256},
     "cluster: String should have at most 255 characters"),
    ("/v1/users/alice/tokens", {"label": "l" * 256},
     "label: String should have at most 255 characters"),
    ("/v1/whatif", {"since": "1d", "set": {"lookback": [1]}},
     "set.lookback: must be a number, a boolean, a text or null, got a list"),
])
def test_a_field_of_several_forms_is_refused_in_one_message(
        svc: Service, route: str, body: dict[str, Any], detail: str) -> None:
    """A field that takes several forms (a list or a text; a number, a boolean, a text or
    null) is checked as the form of the value's JSON type: one message, naming the forms
    when no form has that type, else that form's own problem (the NUL, the empty item),
    never first 'Input should be a valid list'. A bounded text is refused in a string's
    words ('at least 1 character'), not a sequence's ('at least 1 item')."""
    r = svc.call("POST", route, "root", body)
    assert (r.status_code, r.json()["detail"]) == (422, detail)


def test_a_unix_user_change_is_refused_in_one_message(svc: Service) -> None:
    """``PATCH /v1/users/{name}`` with a ``unix_user`` that is neither an account name nor
    "": one message with the rule in words (not one per form, 'unix_user.literal['']: ...',
    nor pydantic's 'String should match pattern ...'); ``POST /v1/users`` says the same."""
    rule = ("is not a Unix account name: a letter or '_', then up to 30 letters, digits, '_' "
            "or '-', and a '$' at the end at most")
    r = svc.call("PATCH", "/v1/users/alice", "root", {"unix_user": "a b"})
    assert (r.status_code, r.json()["detail"]) == (422, f"unix_user: 'a b' {rule}")
    r = svc.call("POST", "/v1/users", "root", {"name": "zed", "unix_user": "z\u202e"})
    assert (r.status_code, r.json()["detail"]) == (422, f"unix_user: 'z\\u202e' {rule}")
    assert svc.call("PATCH", "/v1/users/alice", "root",
                    {"unix_user": ""}).json()["unix_user"] is None


def test_a_database_that_does_not_answer_is_a_503_naming_it(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database stops answering (here every token lookup fails as psycopg fails when
    PostgreSQL is down): each request gets 503 with one line naming the database and the
    driver's reason, not 500 'Internal Server Error' and a traceback per request."""
    from sqlalchemy.exc import OperationalError

    def down(*_a: Any, **_k: Any) -> Any:
        raise OperationalError("SELECT ...", {}, Exception(
            'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
            "Connection refused\nIs the server running on that host?"))

    monkeypatch.setattr(svc.store, "principal_for_token", down)
    r = svc.call("GET", "/v1/workloads", "alice")
    assert r.status_code == 503
    assert r.json()["detail"] == (
        f"database {svc.config.db_url}: connection failed: connection to server at "
        '"127.0.0.1", port 5432 failed: Connection refused')
