"""The authorization matrix: every route of the app, reads included, for an admin, a manager
inside and outside its subtree, a member inside and outside, a scrape token, a revoked
token and no token, each answered with exactly the status the rights in docs/security.md
give. Every route the app serves must be in the matrix (a new route fails this test until
its rights are written down here).

The seeded tree: ``ai`` (manager carol) with ``ai/llm`` (manager dave, member alice) and
``ai/vision`` (member bob), and ``ops``; root is the admin. Each case runs on a fresh copy
of one seeded database, with alice's workload running in ai/llm and bob's in ai/vision."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_env import Env, start_env
from store_db import ServerThread, SwappableApp

from apportion.service.api import create_app
from apportion.service.clock import FakeClock
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store

WHO = ["root", "carol", "dave", "alice", "bob", "scrape", "revoked", "none"]
JOB = {"gpus": 1, "min_runtime": "30m", "command": ["sleep", "60"]}
WHATIF = {"since": "1d", "until": 1_000_100.0}  # the seeding clock starts at 1_000_000


def only(ok: int, *who: str, others: int = 403) -> dict[str, int]:
    """``ok`` for ``who``, ``others`` for the other tokens, 401 without a valid one."""
    return {w: ok if w in who else others for w in WHO[:6]} | {"revoked": 401, "none": 401}


ANY_TOKEN = only(200, *WHO[:6])
EVERYONE = dict.fromkeys(WHO, 200)

# (route as the app names it, method, url, body, expected status per principal)
MATRIX: list[tuple[str, str, str, Any, dict[str, int]]] = [
    # submit: members and managers of the leaf or above, and admins
    ("POST /v1/workloads", "POST", "/v1/workloads", {**JOB, "budget": "ai/llm"},
     only(201, "root", "carol", "dave", "alice")),
    ("POST /v1/workloads", "POST", "/v1/workloads", {**JOB, "budget": "ai/vision"},
     only(201, "root", "carol", "bob")),
    ("GET /v1/workloads", "GET", "/v1/workloads?status=all", None, ANY_TOKEN),
    ("GET /v1/workloads/{workload_id}", "GET", "/v1/workloads/{alice}", None, ANY_TOKEN),
    # cancel and logs: the owner, managers of the budget or above, admins
    ("POST /v1/workloads/{workload_id}/cancel", "POST", "/v1/workloads/{alice}/cancel", None,
     only(200, "root", "carol", "dave", "alice")),
    ("POST /v1/workloads/{workload_id}/cancel", "POST", "/v1/workloads/{bob}/cancel", None,
     only(200, "root", "carol", "bob")),
    # bulk cancel: any user token; each workload the caller may not cancel is answered
    # not_allowed and left as it is (test_api_cancel_many.py)
    ("POST /v1/workloads/cancel", "POST", "/v1/workloads/cancel", {"user": "alice"},
     only(200, "root", "carol", "dave", "alice", "bob")),
    ("GET /v1/workloads/{workload_id}/logs", "GET", "/v1/workloads/{alice}/logs", None,
     only(200, "root", "carol", "dave", "alice")),
    ("GET /v1/workloads/{workload_id}/logs", "GET", "/v1/workloads/{bob}/logs", None,
     only(200, "root", "carol", "bob")),
    ("GET /v1/workloads/{workload_id}/why", "GET", "/v1/workloads/{alice}/why", None,
     ANY_TOKEN),
    ("GET /v1/budgets", "GET", "/v1/budgets", None, ANY_TOKEN),
    ("GET /v1/budgets/usage", "GET", "/v1/budgets/usage", None, ANY_TOKEN),
    ("GET /v1/queue", "GET", "/v1/queue", None, ANY_TOKEN),
    # budgets: children by the parent's managers; top level by admins only
    ("POST /v1/budgets", "POST", "/v1/budgets", {"path": "ai/new"},
     only(201, "root", "carol")),
    ("POST /v1/budgets", "POST", "/v1/budgets", {"path": "research"}, only(201, "root")),
    ("PATCH /v1/budgets/{path}", "PATCH", "/v1/budgets/ai/llm", {"weight": 3},
     only(200, "root", "carol")),
    ("PATCH /v1/budgets/{path}", "PATCH", "/v1/budgets/ai", {"weight": 3}, only(200, "root")),
    ("PUT /v1/budgets/{path}/members", "PUT", "/v1/budgets/ai/llm/members",
     {"members": ["alice", "bob"]}, only(200, "root", "carol", "dave")),
    ("PUT /v1/budgets/{path}/members", "PUT", "/v1/budgets/ai/vision/members",
     {"members": ["alice"]}, only(200, "root", "carol")),
    ("PUT /v1/budgets/{path}/managers", "PUT", "/v1/budgets/ai/llm/managers",
     {"managers": ["dave", "bob"]}, only(200, "root", "carol", "dave")),
    ("PUT /v1/budgets/{path}/managers", "PUT", "/v1/budgets/ai/vision/managers",
     {"managers": ["alice"]}, only(200, "root", "carol")),
    ("GET /v1/hosts", "GET", "/v1/hosts", None, ANY_TOKEN),
    ("POST /v1/hosts/{name}/drain", "POST", "/v1/hosts/h1/drain", {"reason": "fan"},
     only(200, "root")),
    ("POST /v1/hosts/{name}/repair", "POST", "/v1/hosts/h2/repair", None, only(200, "root")),
    # users and tokens: admins; a user may list and revoke its own tokens
    ("POST /v1/users", "POST", "/v1/users", {"name": "zed"}, only(201, "root")),
    ("GET /v1/users", "GET", "/v1/users", None, only(200, "root")),
    ("PATCH /v1/users/{name}", "PATCH", "/v1/users/bob", {"admin": False}, only(200, "root")),
    ("POST /v1/users/{name}/tokens", "POST", "/v1/users/bob/tokens", None, only(201, "root")),
    ("GET /v1/tokens", "GET", "/v1/tokens", None, ANY_TOKEN),
    ("POST /v1/tokens/{token_id}/revoke", "POST", "/v1/tokens/{alice2}/revoke", None,
     only(200, "root", "alice")),
    ("GET /v1/audit", "GET", "/v1/audit", None, ANY_TOKEN),
    ("GET /v1/me", "GET", "/v1/me", None, ANY_TOKEN),
    # usage reports: aggregate GPU-hours, for every valid token (as the usage route)
    ("GET /v1/reports/usage", "GET", "/v1/reports/usage?from=1d", None, ANY_TOKEN),
    # what-if replays (of the day up to just after the seeded submissions): admins, and
    # managers for the weights they may set
    ("POST /v1/whatif", "POST", "/v1/whatif", WHATIF, only(200, "root", "carol", "dave")),
    ("POST /v1/whatif", "POST", "/v1/whatif", {**WHATIF, "set_weight": {"ai/llm": 3}},
     only(200, "root", "carol")),
    ("POST /v1/whatif", "POST", "/v1/whatif", {**WHATIF, "set": {"lookback": "3d"}},
     only(200, "root")),
    # the dashboard's data and /metrics: a token unless [server] public_read
    ("GET /v1/dashboard/state", "GET", "/v1/dashboard/state", None, ANY_TOKEN),
    ("GET /v1/dashboard/usage", "GET", "/v1/dashboard/usage", None, ANY_TOKEN),
    ("GET /v1/dashboard/why/{workload_id}", "GET", "/v1/dashboard/why/{alice}", None,
     ANY_TOKEN),
    ("GET /metrics", "GET", "/metrics", None, ANY_TOKEN),
    # the weights the dashboard offers to change: any token (a scrape token's answer is
    # empty: it may change nothing, and its wall display must log no 403)
    ("GET /v1/dashboard/controls", "GET", "/v1/dashboard/controls", None,
     only(200, "root", "carol", "dave", "alice", "bob", "scrape")),
    # no token needed: liveness, the pages (their data needs one), the API's description
    ("GET /v1/health", "GET", "/v1/health", None, EVERYONE),
    ("GET /", "GET", "/", None, EVERYONE),
    ("GET /sim", "GET", "/sim", None, EVERYONE),
    ("GET /static/{name}", "GET", "/static/dashboard.js", None, EVERYONE),
    ("GET /openapi.json", "GET", "/openapi.json", None, EVERYONE),
    ("GET /docs", "GET", "/docs", None, EVERYONE),
    ("GET /docs/oauth2-redirect", "GET", "/docs/oauth2-redirect", None, EVERYONE),
]


@dataclass
class Template:
    db: Path
    tokens: dict[str, str]
    ids: dict[str, str]
    env: Env


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:
    """The seeded database: two pending workloads, h2 draining, a scrape token and a
    revoked token of the admin, and a second token of alice."""
    d = tmp_path_factory.mktemp("authz")
    env = start_env(d, "sqlite")
    tokens = dict(env.tokens)
    ids = {}
    for who, budget in (("alice", "ai/llm"), ("bob", "ai/vision")):
        r = env.call("POST", "/v1/workloads", who, {**JOB, "budget": budget})
        ids[who] = r.json()["id"]
    assert env.call("POST", "/v1/hosts/h2/drain", "root", {"reason": "x"}).status_code == 200
    for name, user, kind in (("scrape", "root", "scrape"), ("revoked", "root", "user"),
                             ("alice2", "alice", "user")):
        r = env.call("POST", f"/v1/users/{user}/tokens", "root", {"kind": kind})
        tokens[name] = r.json()["token"]
        ids[name] = r.json()["id"]
    assert env.call("POST", f"/v1/tokens/{ids['revoked']}/revoke", "root").status_code == 200
    env.server.stop()
    env.client.close()
    env.store.close()  # checkpoints the WAL: the file alone is the database
    yield Template(d / "apportion.db", tokens, ids, env)


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[ServerThread, SwappableApp]]:
    swap = SwappableApp()
    server = ServerThread(swap)
    yield server, swap
    server.stop()


def _fresh(template: Template, shared: tuple[ServerThread, SwappableApp], tmp: Path
           ) -> tuple[httpx.Client, Store]:
    shutil.copy(template.db, tmp / "apportion.db")
    store = Store(f"sqlite:///{tmp / 'apportion.db'}")
    config = template.env.config
    clock = FakeClock(1_000_000.0)
    executor = MemoryExecutor([(h.name, h.gpus) for h in config.hosts], clock)
    sched = Scheduler(store, executor, config.policy, clock, grace_s=0.0)
    sched.step()  # starts both workloads
    # a minute on: what-if replays history up to now, and the seeded work came at 1_000_000
    clock.advance(60.0)
    for wid in (template.ids["alice"], template.ids["bob"]):
        log = config.logs_dir / wid / "1.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("output\n")
    shared[1].app = create_app(store, sched, config)
    return httpx.Client(base_url=shared[0].url, timeout=30), store


@pytest.mark.parametrize(("route", "method", "url", "body", "want"), MATRIX,
                         ids=[f"{m[1]} {m[2]} {m[3] or ''}" for m in MATRIX])
def test_route_answers_each_principal_as_its_rights_say(
    template: Template, shared: tuple[ServerThread, SwappableApp], tmp_path: Path,
    route: str, method: str, url: str, body: Any, want: dict[str, int],
) -> None:
    """For each principal the status is exactly the matrix's, and a refused request
    changes nothing. A write that succeeded is followed by a fresh copy of the database,
    so each principal is tried on the same state."""
    url = url.format(**template.ids)
    got: dict[str, int] = {}
    changed: list[str] = []
    fresh = True
    client: httpx.Client | None = None
    store: Store | None = None
    try:
        for n, who in enumerate(WHO):
            if fresh:
                if client is not None and store is not None:
                    client.close()
                    store.close()
                d = tmp_path / str(n)
                d.mkdir()
                client, store = _fresh(template, shared, d)
            assert client is not None and store is not None
            headers = {} if who == "none" else {
                "Authorization": f"Bearer {template.tokens[who]}"}
            before = (store.list_workloads(), store.budgets(), store.hosts(), store.users(),
                      store.tokens())
            r = client.request(method, url, json=body, headers=headers)
            got[who] = r.status_code
            fresh = method != "GET" and r.status_code < 400
            if r.status_code >= 400 and (
                store.list_workloads(), store.budgets(), store.hosts(), store.users(),
                store.tokens()) != before:
                changed.append(who)
    finally:
        if client is not None and store is not None:
            client.close()
            store.close()
    assert got == want
    assert changed == []


def test_the_matrix_covers_every_route(template: Template) -> None:
    """Every method and path the app serves has a row in MATRIX."""
    app = create_app(Store("sqlite://"), template.env.scheduler, template.env.config)
    served = set()
    todo = list(app.routes)
    while todo:
        route = todo.pop()
        inner = getattr(route, "original_router", None)  # an included router: its routes
        if inner is not None:
            todo.extend(inner.routes)
            continue
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                path = route.path.replace(":path}", "}")  # type: ignore[attr-defined]
                served.add(f"{method} {path}")
    assert served == {row[0] for row in MATRIX}


def test_a_scrape_token_is_offered_no_weight_controls(
    template: Template, shared: tuple[ServerThread, SwappableApp], tmp_path: Path,
) -> None:
    """The dashboard asks /v1/dashboard/controls on load and every minute: a scrape token of
    the admin is answered with no weight to set (200, empty), where it once got a 403
    that the page logged as an error on a wall display, every minute."""
    client, store = _fresh(template, shared, tmp_path)
    try:
        r = client.get("/v1/dashboard/controls",
                       headers={"Authorization": f"Bearer {template.tokens['scrape']}"})
        assert (r.status_code, r.json()) == (200, {"user": "root", "admin": False,
                                                   "set_weight": []})
    finally:
        client.close()
        store.close()
