"""Tokens with a lifetime (docs/security.md, "Token lifetimes"): created with one from the
API and the CLI, refused with a clear 422 when it is in the past, zero or over
``[auth] max_token_lifetime``, refused with a 401 saying it expired (also from the token
cache) once the service's clock passes it, listed with their expiry, and not counted by
the guard that keeps a valid admin token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_env import Env, start_env
from click.testing import CliRunner

from apportion.cli.main import main
from apportion.service.config import AuthConfig

NOW = 1_000_000.0  # the fake clock's start: 1970-01-12 13:46:40 UTC


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = start_env(tmp_path, "sqlite")
    yield e
    e.close()


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Env]:
    """A server whose tokens live at most a day."""
    e = start_env(tmp_path, "sqlite", auth=AuthConfig(max_token_lifetime=86400.0))
    yield e
    e.close()


def cli(env: Env, who: str, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env={
        "APPORTION_URL": env.server.url, "APPORTION_TOKEN": env.tokens[who],
        "APPORTION_CLIENT_CONFIG": "/dev/null", "TZ": "UTC"})


def new_token(env: Env, user: str, body: dict[str, Any], name: str) -> dict[str, Any]:
    r = env.call("POST", f"/v1/users/{user}/tokens", "root", body)
    assert r.status_code == 201, r.text
    env.tokens[name] = r.json()["token"]
    return dict(r.json())


def test_a_token_created_with_a_lifetime_or_a_date_expires_then_and_the_audit_says_so(
        env: Env) -> None:
    """``expires_in`` counts from the server's clock, ``expires_at`` is taken as given;
    ``token.create``'s audit entry carries the expiry; without either the token never
    expires (as before)."""
    t = new_token(env, "alice", {"expires_in": "2h"}, "a")
    assert (t["expires_at"], t["expired"]) == (NOW + 7200, False)
    a = env.store.audit(limit=1)[0]
    assert (a.action, a.new) == ("token.create", {"token": t["id"], "kind": "user",
                                                  "label": "", "expires_at": NOW + 7200})
    t = new_token(env, "alice", {"expires_at": NOW + 60}, "b")
    assert t["expires_at"] == NOW + 60
    t = new_token(env, "alice", {}, "c")
    assert (t["expires_at"], t["expired"]) == (None, False)


def test_a_tokens_expiry_is_counted_from_its_created_at_one_clock_read(env: Env) -> None:
    """A token made with ``expires_in: 1e-9`` has ``created_at`` the server's now and
    ``expires_at`` that plus the lifetime, never before ``created_at``: both come from one
    read of the server's clock (created_at was the store's own second read, another
    clock's in this service)."""
    t = new_token(env, "alice", {"expires_in": 1e-9}, "tiny")
    assert t["created_at"] == NOW
    assert t["expires_at"] == NOW + 1e-9
    assert t["created_at"] <= t["expires_at"]
    [listed] = [x for x in env.call("GET", "/v1/tokens", "root").json() if x["id"] == t["id"]]
    assert (listed["created_at"], listed["expires_at"]) == (t["created_at"], t["expires_at"])


def test_the_cli_creates_tokens_with_expires_as_a_lifetime_or_a_date(env: Env) -> None:
    """``tokens create --expires 90d`` and ``--expires 1970-02-01T00:00`` (UTC) give those
    expiries, and the CLI says until when the token is valid."""
    r = cli(env, "root", "tokens", "create", "alice", "--expires", "90d")
    assert r.exit_code == 0, r.output
    (t,) = [t for t in env.store.tokens("alice") if t.expires_at is not None]
    assert t.expires_at == NOW + 90 * 86400
    assert f"{t.id}: a user token of alice, valid until 1970-04-12 13:46:40+00:00;" in r.stderr
    r = cli(env, "root", "tokens", "create", "alice", "--expires", "1970-02-01T00:00",
            "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["expires_at"] == 2678400.0  # 1970-02-01 00:00 UTC


@pytest.mark.parametrize(("body", "detail"), [
    ({"expires_in": 0}, "expires_in: must be a lifetime > 0, got 0 s"),
    ({"expires_in": "0s"}, "expires_in: must be a lifetime > 0, got '0s'"),
    ({"expires_at": NOW}, "expires_at: 1970-01-12 13:46:40+00:00 is not in the future (the "
                          "server's time is 1970-01-12 13:46:40+00:00)"),
    ({"expires_at": 86400.0}, "expires_at: 1970-01-02 00:00:00+00:00 is not in the future "
                              "(the server's time is 1970-01-12 13:46:40+00:00)"),
    ({"expires_at": 1e308}, "expires_at: 1e+308 s since the epoch is more than 3650 d after "
                            "the server's time 1970-01-12 13:46:40+00:00 (the cap on any "
                            "duration)"),
    ({"expires_in": "3651d"}, "expires_in: '3651d' is over the cap of 3650 d on any duration"),
    ({"expires_in": "1h", "expires_at": NOW + 60},
     "expires_in, expires_at: give one of them, not both"),
])
def test_a_past_or_zero_expiry_is_refused_naming_the_field(
        env: Env, body: dict[str, Any], detail: str) -> None:
    """A lifetime <= 0, a time not after the server's now, one over the cap on any
    duration (3650 d), or both forms at once: 422 saying what and where, and no token is
    made."""
    before = env.store.tokens()
    r = env.call("POST", "/v1/users/alice/tokens", "root", body)
    assert (r.status_code, r.json()["detail"]) == (422, detail)
    assert env.store.tokens() == before


def test_the_cli_names_expires_as_typed_when_refused(env: Env) -> None:
    """The CLI's refusals name ``--expires``: a zero lifetime (the server's 422), a past
    date, and text that is neither a lifetime nor a date (the CLI's own); exit 2."""
    r = cli(env, "root", "tokens", "create", "alice", "--expires", "0")
    assert r.exit_code == 2
    assert r.stderr.strip() == "Error: --expires: must be a lifetime > 0, got '0' (HTTP 422)"
    r = cli(env, "root", "tokens", "create", "alice", "--expires", "1970-01-01")
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: --expires: 1970-01-01 00:00:00+00:00 is not in the "
                               "future")
    r = cli(env, "root", "tokens", "create", "alice", "--expires", "soon")
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "Error: --expires: must be a lifetime (90d, 12h, 1h30m) or a date (2026-12-31) or a "
        "date and time (2026-12-31T18:00, UTC unless it says otherwise), got 'soon'")


def test_a_negative_expires_is_refused_as_a_lifetime_not_greater_than_0(env: Env) -> None:
    """``--expires -1`` (``-1.5``, ``-5d``) is refused as ``--expires 0`` is, a lifetime that
    must be > 0, quoting it as typed (exit 2), not as the epoch time -1 with pydantic's
    ``Input should be greater than or equal to 0``, which 0 does not pass either; no token
    is made."""
    before = env.call("GET", "/v1/tokens", "root").json()
    for typed in ("-1", "-1.5", "-5d"):
        r = cli(env, "root", "tokens", "create", "alice", f"--expires={typed}")
        assert r.exit_code == 2, r.output
        assert r.stderr.strip() == f"Error: --expires: must be a lifetime > 0, got '{typed}'"
    assert env.call("GET", "/v1/tokens", "root").json() == before


def test_max_token_lifetime_is_the_default_and_a_longer_one_is_refused(capped: Env) -> None:
    """With ``[auth] max_token_lifetime = 1d``, a token made without an expiry lives a
    day; one asked for longer (as a lifetime or a date) is refused with 422 naming the
    field and the limit; one within it is made."""
    assert new_token(capped, "alice", {}, "a")["expires_at"] == NOW + 86400
    r = capped.call("POST", "/v1/users/alice/tokens", "root", {"expires_in": "2d"})
    assert (r.status_code, r.json()["detail"]) == (
        422, "expires_in: '2d' is over the server's limit ([auth] max_token_lifetime: 1 d)")
    r = capped.call("POST", "/v1/users/alice/tokens", "root", {"expires_at": NOW + 86401})
    assert (r.status_code, r.json()["detail"]) == (
        422, "expires_at: 1970-01-13 13:46:41+00:00 is past the server's limit ([auth] "
             "max_token_lifetime: 1 d), which ends at 1970-01-13 13:46:40+00:00")
    assert new_token(capped, "alice", {"expires_in": "12h"}, "b")["expires_at"] == NOW + 43200
    r = cli(capped, "root", "tokens", "create", "alice", "--expires", "30d")
    assert r.exit_code == 2 and r.stderr.startswith(
        "Error: --expires: '30d' is over the server's limit")


def test_an_expired_token_is_refused_saying_when_even_while_cached(env: Env) -> None:
    """A token used a moment ago (so in the server's 30 s token cache) gets 401 once the
    service's clock passes its expiry, seconds later, with a detail that says it expired,
    when, and what to do, unlike an unknown token's; it works up to its expiry."""
    t = new_token(env, "alice", {"expires_in": 60}, "short")
    assert env.call("GET", "/v1/budgets", "short").status_code == 200  # cached now
    env.clock.advance(59)
    assert env.call("GET", "/v1/budgets", "short").status_code == 200
    env.clock.advance(1)
    r = env.call("GET", "/v1/budgets", "short")
    assert r.status_code == 401
    assert r.json()["detail"] == (
        f"token {t['id']} expired at 1970-01-12 13:47:40+00:00; ask an admin for a new one "
        "(apportion tokens create alice)")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    env.tokens["nobody"] = "x" * 43
    assert env.call("GET", "/v1/budgets", "nobody").json()["detail"] == "invalid token"
    assert env.call("GET", "/v1/budgets", "alice").status_code == 200  # her other token


def test_the_cli_says_a_token_expired_in_one_line_and_exits_43(env: Env) -> None:
    """A command run with an expired token prints the server's words on one line and exits
    with 43 (refused: no valid token)."""
    t = new_token(env, "alice", {"expires_in": 60}, "short")
    env.clock.advance(3600)
    r = cli(env, "short", "queue")
    assert r.exit_code == 43
    assert r.stderr == (
        f"Error: token {t['id']} expired at 1970-01-12 13:47:40+00:00; ask an admin for a new "
        "one (apportion tokens create alice) (HTTP 401)\n")


def test_tokens_list_shows_when_each_expires_and_which_have(env: Env) -> None:
    """``tokens list`` has an EXPIRES column: never, the time, or ``expired`` and the time
    once the server's clock passed it; ``--json`` carries ``expires_at`` and ``expired``."""
    new_token(env, "alice", {"expires_in": 60, "label": "short"}, "short")
    new_token(env, "alice", {"expires_in": "1d", "label": "day"}, "day")
    env.clock.advance(120)
    r = cli(env, "root", "tokens", "list", "--user", "alice")
    assert r.exit_code == 0, r.output
    header, *rows = r.stdout.splitlines()
    assert header.split() == ["ID", "USER", "KIND", "CREATED", "EXPIRES", "REVOKED", "LABEL"]
    by_label = {row.split()[-1]: row for row in rows}
    assert "  never  " in by_label["-"]
    assert "expired 1970-01-12 13:47:40+00:00" in by_label["short"]
    assert "  1970-01-13 13:46:40+00:00  " in by_label["day"]
    r = cli(env, "root", "tokens", "list", "--user", "alice", "--json")
    got = {t["label"]: (t["expires_at"], t["expired"]) for t in json.loads(r.stdout)}
    assert got == {"": (None, False), "short": (NOW + 60, True), "day": (NOW + 86400, False)}


def test_the_last_admin_token_cannot_be_revoked_when_the_other_has_expired(
        env: Env) -> None:
    """root (the only admin) holds its own token and one that has expired: revoking the
    valid one is refused as for a last token (the expired one keeps nobody able to
    administer), and so is taking root's admin flag while bob, the other admin, holds only
    an expired token; the expired one may be revoked."""
    old = new_token(env, "root", {"expires_in": 60}, "root-old")
    env.clock.advance(61)
    (valid,) = [t["id"] for t in env.call("GET", "/v1/tokens?user=root", "root").json()
                if t["expires_at"] is None]
    r = env.call("POST", f"/v1/tokens/{valid}/revoke", "root")
    assert r.status_code == 409
    assert r.json()["detail"].startswith(f"token {valid}: the last valid token of an admin")
    (bobs,) = env.call("GET", "/v1/tokens?user=bob", "root").json()
    assert env.call("POST", f"/v1/tokens/{bobs['id']}/revoke", "root").status_code == 200
    assert env.call("PATCH", "/v1/users/bob", "root", {"admin": True}).status_code == 200
    new_token(env, "bob", {"expires_in": 60}, "bob-short")
    env.clock.advance(61)
    r = env.call("PATCH", "/v1/users/root", "root", {"admin": False})
    assert r.status_code == 409 and "root is the last admin with a valid token" in r.text
    assert env.call("POST", f"/v1/tokens/{old['id']}/revoke", "root").status_code == 200
