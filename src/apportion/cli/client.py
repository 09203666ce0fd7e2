"""Client commands: talk to a running ``apportion serve`` over HTTP.

Server and token come from ``--url``/``--token``, else ``APPORTION_URL``/``APPORTION_TOKEN``,
else the client config file (``~/.config/apportion/client.toml``, or the path in
``APPORTION_CLIENT_CONFIG``) with keys ``url`` and ``token`` (or ``token_file``). Read
commands take ``--json`` for machine-readable output; errors print the server's message and
exit with status 1.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import httpx

DEFAULT_URL = "http://127.0.0.1:8642"
F = TypeVar("F", bound=Callable[..., Any])


# ---- connection ------------------------------------------------------------------------------
def _config_file() -> dict[str, Any]:
    path = Path(
        os.environ.get("APPORTION_CLIENT_CONFIG")
        or Path.home() / ".config" / "apportion" / "client.toml"
    )
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise click.ClickException(f"{path}: {e}") from None
    if "token_file" in data and "token" not in data:
        token_path = Path(str(data["token_file"])).expanduser()
        try:
            data["token"] = token_path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise click.ClickException(
                f"{path}: token_file: cannot read {token_path}: {e}"
            ) from None
    return data


class Client:
    """A thin HTTP client; every error becomes a ClickException with the server's message."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def call(self, method: str, path: str, body: Any = None,
             params: dict[str, Any] | None = None) -> httpx.Response:
        try:
            r = self.http.request(
                method, f"/v1{path}", json=body,
                params={k: v for k, v in (params or {}).items() if v is not None},
            )
        except httpx.HTTPError as e:
            raise click.ClickException(f"cannot reach the server at {self.url}: {e}") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise click.ClickException(f"{detail} (HTTP {r.status_code})")
        return r

    def json(self, method: str, path: str, body: Any = None,
             params: dict[str, Any] | None = None) -> Any:
        return self.call(method, path, body, params).json()


def connection(f: F) -> F:
    """Add --url and --token to a command and pass a ready ``client`` instead."""
    import functools

    @click.option("--url", envvar="APPORTION_URL", help="server URL (env APPORTION_URL)")
    @click.option("--token", envvar="APPORTION_TOKEN", help="bearer token (env APPORTION_TOKEN)")
    @functools.wraps(f)
    def wrapper(*args: Any, url: str | None, token: str | None, **kwargs: Any) -> Any:
        if url is None or token is None:
            cfg = _config_file()
            url = url or cfg.get("url")
            token = token or cfg.get("token")
        return f(*args, client=Client(url or DEFAULT_URL, token), **kwargs)

    return wrapper  # type: ignore[return-value]


json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


# ---- formatting ------------------------------------------------------------------------------
def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s == 0:
        return "0"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out += f"{s // size}{unit}"
            s %= size
    return out


def fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print an aligned text table."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    click.echo(line.format(*headers).rstrip())
    for r in cells:
        click.echo(line.format(*r).rstrip())


# ---- workloads -------------------------------------------------------------------------------
@click.command(context_settings={"ignore_unknown_options": False})
@click.option("--budget", required=True, help="leaf budget path, e.g. ai/llm/alice")
@click.option("--gpus", required=True, type=int, help="GPUs (gang-scheduled)")
@click.option("--min-runtime", required=True,
              help="minimum runtime: 30m, 8h, seconds; 0 = unallocated (free, preemptible)")
@click.option("--resumable", is_flag=True, help="may be preempted and requeued after min-runtime")
@click.option("--priority", type=int, default=0, help="order within the budget only")
@click.option("--checkpoint-interval", default="0", help="how often it checkpoints (e.g. 30m)")
@click.option("--checkpoint-on-term", is_flag=True,
              help="it writes a checkpoint when told to stop (SIGTERM), within the grace period")
@json_option
@click.argument("command", nargs=-1, required=True)
@connection
def submit(client: Client, budget: str, gpus: int, min_runtime: str, resumable: bool,
           priority: int, checkpoint_interval: str, checkpoint_on_term: bool, as_json: bool,
           command: tuple[str, ...]) -> None:
    """Submit a workload: apportion submit --budget B --gpus N --min-runtime 30m -- CMD..."""
    w = client.json("POST", "/workloads", {
        "budget": budget, "gpus": gpus, "min_runtime": min_runtime, "resumable": resumable,
        "priority": priority, "checkpoint_interval": checkpoint_interval,
        "checkpoint_on_term": checkpoint_on_term, "command": list(command),
    })
    if as_json:
        _print_json(w)
    else:
        click.echo(f"submitted {w['id']} to {w['budget']} ({w['gpus']} GPUs, min runtime "
                   f"{fmt_duration(w['min_runtime'])})")


@click.command()
@click.option("--status", default=None, help="comma-separated statuses, or 'all'")
@click.option("--budget", default=None, help="a budget node: its whole subtree")
@click.option("--user", default=None)
@click.option("--all", "show_all", is_flag=True, help="every status, not only active work")
@json_option
@connection
def queue(client: Client, status: str | None, budget: str | None, user: str | None,
          show_all: bool, as_json: bool) -> None:
    """List workloads (default: pending, running, stopping)."""
    if show_all:
        status = "all"
    rows = client.json("GET", "/workloads",
                       params={"status": status, "budget": budget, "user": user})
    if as_json:
        _print_json(rows)
        return
    table(
        ["ID", "STATUS", "BUDGET", "USER", "GPUS", "MIN_RUNTIME", "QUEUED", "PLACEMENT"],
        [
            [w["id"], w["status"] + ("*" if w["cancel_requested"] and w["status"] not in (
                "cancelled",) else ""), w["budget"], w["user"], w["gpus"],
             fmt_duration(w["min_runtime"]), fmt_time(w["queued_at"]),
             ",".join(f"{h}:{g}" for h, g, _ in w["attempt"]["placement"])
             if w["attempt"] else "-"]
            for w in rows
        ],
    )


@click.command()
@click.argument("workload_id")
@json_option
@connection
def show(client: Client, workload_id: str, as_json: bool) -> None:
    """Show one workload and its attempts."""
    w = client.json("GET", f"/workloads/{workload_id}")
    if as_json:
        _print_json(w)
        return
    for key in ("id", "status", "budget", "user", "gpus"):
        click.echo(f"{key + ':':<21}{w[key]}")
    click.echo(f"{'min_runtime:':<21}{fmt_duration(w['min_runtime'])}")
    click.echo(f"{'resumable:':<21}{w['resumable']}")
    click.echo(f"{'priority:':<21}{w['priority']}")
    click.echo(f"{'checkpoint_interval:':<21}{fmt_duration(w['checkpoint_interval'])}")
    click.echo(f"{'checkpoint_on_term:':<21}{w.get('checkpoint_on_term', False)}")
    click.echo(f"{'command:':<21}{' '.join(w['command'])}")
    click.echo(f"{'submitted:':<21}{fmt_time(w['submit_time'])}")
    if w["cancel_requested"]:
        click.echo(f"{'cancel requested:':<21}yes")
    if w["end_reason"]:
        click.echo(f"{'ended:':<21}{w['end_reason']} (exit {w['exit_code']})")
    if w["attempts"]:
        click.echo("attempts:")
        table(
            ["N", "STARTED", "ENDED", "PLACEMENT", "GPU_HOURS", "EXIT", "REASON"],
            [[a["n"], fmt_time(a["started_at"]), fmt_time(a["ended_at"]),
              ",".join(f"{h}:{g}" for h, g, _ in a["placement"]),
              "-" if a["gpu_seconds"] is None else f"{a['gpu_seconds'] / 3600:.2f}",
              "-" if a["exit_code"] is None else a["exit_code"], a["end_reason"] or "-"]
             for a in w["attempts"]],
        )


@click.command()
@click.argument("workload_id")
@connection
def cancel(client: Client, workload_id: str) -> None:
    """Cancel a workload (a running one is stopped by the scheduler)."""
    w = client.json("POST", f"/workloads/{workload_id}/cancel")
    if w["status"] == "cancelled":
        click.echo(f"cancelled {w['id']}")
    else:
        click.echo(f"cancel requested for {w['id']} ({w['status']}); the scheduler stops it")


@click.command()
@click.argument("workload_id")
@click.option("--attempt", type=int, default=None, help="attempt number (default: latest)")
@click.option("--tail", type=int, default=0, help="only the last N bytes")
@connection
def logs(client: Client, workload_id: str, attempt: int | None, tail: int) -> None:
    """Print the output of a workload's attempt."""
    r = client.call("GET", f"/workloads/{workload_id}/logs",
                    params={"attempt": attempt, "tail": tail or None})
    click.echo(r.text, nl=False)


@click.command()
@click.argument("workload_id")
@json_option
@connection
def why(client: Client, workload_id: str, as_json: bool) -> None:
    """Explain why a workload waits (or until when it is protected)."""
    data = client.json("GET", f"/workloads/{workload_id}/why")
    if as_json or not isinstance(data, dict):
        _print_json(data)
        return
    for key, value in data.items():
        if isinstance(value, dict | list):
            click.echo(f"{key}:")
            click.echo("  " + json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n  "))
        else:
            click.echo(f"{key}: {value}")


# ---- budgets ---------------------------------------------------------------------------------
@click.group()
def budgets() -> None:
    """The budget tree: show, change weights and people, usage."""


@budgets.command("tree")
@json_option
@connection
def budgets_tree(client: Client, as_json: bool) -> None:
    """Show the tree with weights, shares, managers and members."""
    rows = client.json("GET", "/budgets")
    if as_json:
        _print_json(rows)
        return
    table(
        ["BUDGET", "WEIGHT", "SHARE", "MANAGERS", "MEMBERS"],
        [["  " * r["path"].count("/") + r["path"].rsplit("/", 1)[-1], f"{r['weight']:g}",
          f"{100 * r['share']:.1f}%", ",".join(r["managers"]) or "-",
          ",".join(r["members"]) or "-"] for r in rows],
    )


@budgets.command("set")
@click.argument("path")
@click.argument("weight", type=float)
@connection
def budgets_set(client: Client, path: str, weight: float) -> None:
    """Set a node's weight."""
    b = client.json("PATCH", f"/budgets/{path}", {"weight": weight})
    click.echo(f"{b['path']}: weight {b['weight']:g}")


@budgets.command("members")
@click.argument("path")
@click.argument("names", nargs=-1)
@connection
def budgets_members(client: Client, path: str, names: tuple[str, ...]) -> None:
    """Replace a node's members (none: remove all)."""
    b = client.json("PUT", f"/budgets/{path}/members", {"members": list(names)})
    click.echo(f"{b['path']}: members {', '.join(b['members']) or '(none)'}")


@budgets.command("managers")
@click.argument("path")
@click.argument("names", nargs=-1)
@connection
def budgets_managers(client: Client, path: str, names: tuple[str, ...]) -> None:
    """Replace a node's managers (none: remove all)."""
    b = client.json("PUT", f"/budgets/{path}/managers", {"managers": list(names)})
    click.echo(f"{b['path']}: managers {', '.join(b['managers']) or '(none)'}")


@budgets.command("create")
@click.argument("path")
@click.option("--weight", type=float, default=1.0)
@click.option("--manager", "managers", multiple=True, help="repeatable")
@click.option("--member", "members", multiple=True, help="repeatable")
@connection
def budgets_create(client: Client, path: str, weight: float, managers: tuple[str, ...],
                   members: tuple[str, ...]) -> None:
    """Create a budget node below an existing one."""
    b = client.json("POST", "/budgets", {"path": path, "weight": weight,
                                         "managers": list(managers), "members": list(members)})
    click.echo(f"created {b['path']} (weight {b['weight']:g})")


@budgets.command("usage")
@json_option
@connection
def budgets_usage(client: Client, as_json: bool) -> None:
    """Charged and free GPU-hours over the lookback window, and usage ratios."""
    u = client.json("GET", "/budgets/usage")
    if as_json:
        _print_json(u)
        return
    click.echo(f"lookback {fmt_duration(u['lookback_s'])}, from the {u.get('source', 'store')}")
    table(
        ["BUDGET", "SHARE", "CHARGED_GPU_H", "FREE_GPU_H", "RATIO"],
        [["  " * b["path"].count("/") + b["path"].rsplit("/", 1)[-1],
          f"{100 * b['share']:.1f}%", f"{b['charged_gpu_hours']:.1f}",
          f"{b['free_gpu_hours']:.1f}",
          "-" if b["usage_ratio"] is None else f"{b['usage_ratio']:.2f}"]
         for b in u["budgets"]],
    )


# ---- hosts and audit -------------------------------------------------------------------------
@click.group()
def hosts() -> None:
    """Hosts: list, drain, repair."""


@hosts.command("list")
@json_option
@connection
def hosts_list(client: Client, as_json: bool) -> None:
    """List hosts with their state and GPUs in use."""
    rows = client.json("GET", "/hosts")
    if as_json:
        _print_json(rows)
        return
    table(["HOST", "STATE", "GPUS", "USED", "SINCE", "REASON"],
          [[h["name"], h["state"], h["gpus"], h["gpus_used"], fmt_time(h["changed_at"]),
            h["reason"] or "-"] for h in rows])


@hosts.command("drain")
@click.argument("name")
@click.option("--reason", default="", help="why (kept in the audit log)")
@connection
def hosts_drain(client: Client, name: str, reason: str) -> None:
    """Drain a host: no new work; it empties as protections end, then goes to repair."""
    h = client.json("POST", f"/hosts/{name}/drain", {"reason": reason})
    click.echo(f"{h['name']}: {h['state']}")


@hosts.command("repair")
@click.argument("name")
@click.option("--reason", default="", help="what was done (kept in the audit log)")
@connection
def hosts_repair(client: Client, name: str, reason: str) -> None:
    """Mark a host repaired: healthy again (also calls off a drain)."""
    h = client.json("POST", f"/hosts/{name}/repair", {"reason": reason})
    click.echo(f"{h['name']}: {h['state']}")


@click.command()
@click.option("--limit", type=int, default=50)
@click.option("--target", default=None, help="only entries about this budget/host/workload")
@json_option
@connection
def audit(client: Client, limit: int, target: str | None, as_json: bool) -> None:
    """Who changed what, when (newest first)."""
    rows = client.json("GET", "/audit", params={"limit": limit, "target": target})
    if as_json:
        _print_json(rows)
        return

    def brief(v: Any) -> str:
        return "-" if v is None else json.dumps(v, sort_keys=True)

    table(["WHEN", "ACTOR", "ACTION", "TARGET", "OLD", "NEW"],
          [[fmt_time(a["at"]), a["actor"], a["action"], a["target"], brief(a["old"]),
            brief(a["new"])] for a in rows])
