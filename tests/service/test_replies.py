"""Typed replies (service/replies.py) keep the JSON on the wire: each reply is, key for key
and value for value, what the store's rows say (``as_dict``), and the CLI parses them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_env import Env, start_env

from apportion.core import Status
from apportion.service.accounting import usage_report
from apportion.service.auth import redact
from apportion.service.replies import (
    AuditEntry,
    Budget,
    BudgetUsage,
    BudgetUsageRow,
    HostInUse,
    MonthUsageRow,
    QueueView,
    Token,
    UsageReport,
    User,
    UserUsageRow,
    Workload,
)

JOB = {"budget": "ai/llm", "gpus": 2, "min_runtime": "30m", "command": ["sleep", "60"]}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = start_env(tmp_path, "sqlite")
    yield e
    e.close()


def _ok(r: Any) -> Any:
    assert r.status_code < 300, r.text
    return r.json()


def test_workload_replies_are_the_stored_rows(env: Env) -> None:
    """Submit, show (with attempts), list, and cancel answer exactly ``WorkloadRow.as_dict``
    (attempts only in show, ``array_ids`` only on an array's submission); another user
    sees the redacted row (``private: true``, private fields null)."""
    first = _ok(env.call("POST", "/v1/workloads", "alice", JOB))
    array = _ok(env.call("POST", "/v1/workloads", "alice", {**JOB, "array": "0-2"}))
    env.scheduler.step()  # something starts, so an attempt is shown
    row = env.store.get_workload(first["id"])
    assert row.attempts, "the first workload should have started"
    assert first == env.store.get_workload(first["id"]).as_submitted().as_dict()
    assert array == {**env.store.get_workload(array["id"]).as_submitted().as_dict(),
                     "array_ids": env.store.array_ids(array["id"])}
    assert len(array["array_ids"]) == 3
    shown = _ok(env.call("GET", f"/v1/workloads/{first['id']}", "alice"))
    assert shown == row.as_dict(with_attempts=True) and "private" not in shown
    listed = _ok(env.call("GET", "/v1/workloads?status=all", "alice"))
    assert listed == [w.as_dict() for w in env.store.list_workloads(list(Status))]
    other = _ok(env.call("GET", f"/v1/workloads/{first['id']}", "bob"))
    assert other == redact(row.as_dict(with_attempts=True))
    cancelled = _ok(env.call("POST", f"/v1/workloads/{first['id']}/cancel", "alice"))
    # the cancel's row is the store's answer to the cancel, which leaves out the attempt
    assert {**cancelled, "attempt": None} == {
        **env.store.get_workload(first["id"]).as_dict(), "attempt": None}
    assert cancelled["cancel_requested"] is True
    for data in (first, array, shown, other, cancelled, *listed):
        assert Workload.model_validate(data).id == data["id"]


def test_other_replies_are_the_stored_rows(env: Env) -> None:
    """Hosts, users, tokens and audit entries answer their rows' fields exactly; budgets and
    usage parse into their models with every node of the tree."""
    hosts = _ok(env.call("GET", "/v1/hosts", "root"))
    assert hosts == [{**h.as_dict(), "gpus_used": 0} for h in env.store.hosts()]
    users = _ok(env.call("GET", "/v1/users", "root"))
    assert users == [{"name": u.name, "admin": u.admin, "unix_user": u.unix_user,
                      "account": u.account, "cannot_run": None}  # memory: no account checks
                     for u in env.store.users()]
    tokens = _ok(env.call("GET", "/v1/tokens", "root"))
    # and whether each has expired, on the service's clock
    assert tokens == [{**t.as_dict(), "expired": t.expired(env.clock.now())}
                      for t in env.store.tokens()]
    new = _ok(env.call("POST", "/v1/users/alice/tokens", "root", {"label": "ci"}))
    assert set(new) == {*tokens[0], "token"} and new["label"] == "ci"
    audit = _ok(env.call("GET", "/v1/audit?limit=5", "root"))
    assert audit == [a.as_dict() for a in env.store.audit(limit=5)]
    drained = _ok(env.call("POST", f"/v1/hosts/{hosts[0]['name']}/drain", "root", {}))
    assert drained == env.store.get_host(hosts[0]["name"]).as_dict()
    budgets = [Budget.model_validate(b) for b in _ok(env.call("GET", "/v1/budgets", "alice"))]
    usage = BudgetUsage.model_validate(_ok(env.call("GET", "/v1/budgets/usage", "alice")))
    assert sorted(b.path for b in budgets) == sorted(n.path for n in usage.budgets) != []
    for model, rows in ((HostInUse, hosts), (User, users), (Token, tokens),
                        (AuditEntry, audit)):
        assert [model.model_validate(r).model_dump() for r in rows] == rows


SPEC_KEYS = {"id", "budget", "user", "gpus", "min_runtime", "allocated", "resumable",
             "priority", "submit_time", "time_limit", "name"}


def test_queue_reply_has_the_documented_keys(env: Env) -> None:
    """``GET /v1/queue`` answers ``now``, ``last_pass_at``, ``pending``, ``running``,
    ``hosts``, ``budgets``, ``capacity_gpu_s``, ``executor_down_since`` and
    ``executor_problem``; a queued entry has no ``hold`` key, a held one has it, and the
    reply parses into ``QueueView``."""
    first = _ok(env.call("POST", "/v1/workloads", "alice", JOB))
    waiting = _ok(env.call("POST", "/v1/workloads", "alice", {**JOB, "gpus": 16}))
    held = _ok(env.call("POST", "/v1/workloads", "alice",
                        {**JOB, "dependency": f"afterok:{first['id']}"}))
    env.scheduler.step()
    view = _ok(env.call("GET", "/v1/queue", "alice"))
    assert set(view) == {"now", "last_pass_at", "pending", "running", "hosts", "budgets",
                         "capacity_gpu_s", "executor_down_since", "executor_problem"}
    pending = {p["id"]: p for p in view["pending"]}
    assert set(pending[waiting["id"]]) == SPEC_KEYS | {"position", "queued_at", "wait_reason"}
    assert set(pending[held["id"]]) == set(pending[waiting["id"]]) | {"hold"}
    assert pending[held["id"]]["hold"] == f"dependency: waiting for {first['id']}"
    assert [set(r) for r in view["running"]] == [SPEC_KEYS | {
        "attempt", "placement", "started_at", "protected_until", "stopping", "stop_reason"}]
    assert QueueView.model_validate(view).model_dump(mode="json") == view


@pytest.mark.parametrize("by", ["budget", "user", "month"])
def test_usage_report_reply_is_the_report(env: Env, by: str) -> None:
    """``GET /v1/reports/usage`` answers exactly what ``accounting.usage_report`` builds for
    the same period, keys in order (so a key the report gains that ``UsageReport`` lacks
    fails here), and parses into ``UsageReport`` with the rows ``by`` asks for."""
    _ok(env.call("POST", "/v1/workloads", "alice", JOB))
    env.scheduler.step()
    start = env.clock.now() - 86400
    env.clock.set(env.clock.now() + 5400)
    env.scheduler.step()
    end = env.clock.now()
    got = _ok(env.call("GET", f"/v1/reports/usage?from={start!r}&to={end!r}&by={by}", "alice"))
    want = usage_report(env.store, start, end, by, end, env.config.pools)
    assert got == want and json.dumps(got) == json.dumps(want)
    assert want["rows"] and any(r["charged_gpu_hours"] > 0 for r in want["rows"])
    report = UsageReport.model_validate(got)
    row = {"budget": BudgetUsageRow, "user": UserUsageRow, "month": MonthUsageRow}[by]
    assert {type(r) for r in report.rows} == {row}
    assert report.model_dump(mode="json", by_alias=True) == got
