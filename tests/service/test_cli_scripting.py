"""``apportion cancel`` and the write commands a nightly sync runs, against a seeded
service (memory executor, fake clock) under uvicorn: what a script reads from them, their
``--json`` and their exit codes (docs/cli.md, "cancel" and "Exit codes")."""

from __future__ import annotations

import json

from click.testing import CliRunner, Result
from test_api import Service, shared_server, submit, svc, template

from apportion.cli.main import main
from apportion.service.executors.memory import MemoryExecutor

__all__ = ["shared_server", "svc", "template"]  # fixtures, used by name


def cli(svc: Service, who: str, *args: str) -> Result:
    """Run a client command in-process against ``svc`` as ``who``."""
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens[who],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_cancel_again_by_id_succeeds_saying_it_ended_and_an_unknown_id_still_fails(
        svc: Service) -> None:
    """``cancel ID`` run again on work it cancelled (a retry after a timeout), or on work
    that completed, exits 0 with ``ID: already cancelled`` on stdout, as ``cancel --me``
    leaves ended work out without failing (it exited 49, ``1 of 1 workload not
    cancelled``); an id that does not exist still fails with 44 beside them."""
    done = submit(svc).json()["id"]
    svc.scheduler.step()
    executor = svc.scheduler.executor
    assert isinstance(executor, MemoryExecutor)
    executor.finish(done)
    svc.scheduler.step()
    completed = cli(svc, "alice", "cancel", done)
    assert (completed.exit_code, completed.stdout, completed.stderr) == (
        0, f"{done}: already completed\n", "")
    wid = submit(svc).json()["id"]
    first = cli(svc, "alice", "cancel", wid)
    assert (first.exit_code, first.stdout) == (0, f"cancelled {wid}\n")
    again = cli(svc, "alice", "cancel", wid)
    assert (again.exit_code, again.stdout, again.stderr) == (
        0, f"{wid}: already cancelled\n", "")
    both = cli(svc, "alice", "cancel", wid, "999999")
    assert both.exit_code == 44, both.output
    assert both.stdout == f"{wid}: already cancelled\n"
    assert both.stderr == ("w-999999: workload w-999999: not found\n"
                           "Error: 1 of 2 workloads not cancelled\n")


def test_cancel_json_prints_the_servers_rows_as_one_document_and_keeps_the_exit_code(
        svc: Service) -> None:
    """``cancel --json`` prints on stdout one JSON document, ``{"workloads": [...]}`` with
    the rows ``POST /v1/workloads/cancel`` answers (id, result, status, detail), in the
    order given, and nothing else; a refused id is still said on stderr with the exit code
    of its refusal (44); with nothing matched it prints ``{"workloads": []}``."""
    running = submit(svc, gpus=8).json()["id"]
    svc.scheduler.step()
    pending = submit(svc).json()["id"]
    r = cli(svc, "alice", "cancel", "--json", pending, running, "999999")
    assert r.exit_code == 44, r.output
    assert json.loads(r.stdout) == {"workloads": [
        {"id": pending, "result": "cancelled", "status": "cancelled", "detail": None},
        {"id": running, "result": "cancel_requested", "status": "running", "detail": None},
        {"id": "w-999999", "result": "not_found", "status": None,
         "detail": "workload w-999999: not found"},
    ]}
    assert r.stderr == ("w-999999: workload w-999999: not found\n"
                        "Error: 1 of 3 workloads not cancelled\n")
    again = cli(svc, "alice", "cancel", "--json", pending)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == {"workloads": [
        {"id": pending, "result": "ended", "status": "cancelled",
         "detail": f"workload {pending}: status: already cancelled"}]}
    nothing = cli(svc, "bob", "cancel", "--json", "--me")
    assert (nothing.exit_code, json.loads(nothing.stdout)) == (0, {"workloads": []})


def test_write_commands_json_prints_the_servers_answer_as_one_document(
        svc: Service) -> None:
    """``--json`` on the write commands a nightly sync runs (``users add/set``, ``budgets
    create/set/members/managers``, ``hosts drain/repair``, ``tokens revoke``) prints on
    stdout one JSON document, the server's answer as ``GET`` reads the same item back (they
    had no ``--json``: only a sentence); a refusal prints nothing on stdout and exits with
    its code (49: the user exists already)."""
    token = svc.call("POST", "/v1/users/bob/tokens", "root", {"kind": "user"}).json()["id"]
    runs: list[tuple[list[str], str, dict[str, object]]] = [
        (["users", "add", "erin"], "/v1/users", {"name": "erin", "admin": False}),
        (["users", "set", "erin", "--admin"], "/v1/users", {"name": "erin", "admin": True}),
        (["budgets", "create", "ai/robotics", "--weight", "2", "--member", "bob"],
         "/v1/budgets", {"path": "ai/robotics", "weight": 2.0, "members": ["bob"]}),
        (["budgets", "set", "ai/robotics", "3"], "/v1/budgets",
         {"path": "ai/robotics", "weight": 3.0}),
        (["budgets", "members", "ai/robotics", "alice", "bob"], "/v1/budgets",
         {"path": "ai/robotics", "members": ["alice", "bob"]}),
        (["budgets", "managers", "ai/robotics", "dave"], "/v1/budgets",
         {"path": "ai/robotics", "managers": ["dave"]}),
        (["hosts", "drain", "h2", "--reason", "fan"], "/v1/hosts",
         {"name": "h2", "state": "draining", "reason": "fan"}),
        (["hosts", "repair", "h2"], "/v1/hosts", {"name": "h2", "state": "healthy"}),
        (["tokens", "revoke", token], "/v1/tokens", {"id": token, "user": "bob"}),
    ]
    for args, listed, expected in runs:
        r = cli(svc, "root", *args, "--json")
        assert r.exit_code == 0, (args, r.output)
        answer = json.loads(r.stdout)
        assert {k: answer[k] for k in expected} == expected, args
        key = "id" if "id" in expected else "name" if "name" in expected else "path"
        [item] = [x for x in svc.call("GET", listed, "root").json()
                  if x[key] == answer[key]]
        assert {k: item[k] for k in answer if k in item} == {
            k: answer[k] for k in answer if k in item}, args
    again = cli(svc, "root", "users", "add", "erin", "--json")
    assert (again.exit_code, again.stdout) == (49, "")
    assert again.stderr.startswith("Error: ")
    text = cli(svc, "root", "budgets", "set", "ai/robotics", "4")
    assert (text.exit_code, text.stdout) == (0, "ai/robotics: weight 4\n")


def test_budgets_create_under_a_missing_parent_exits_2_not_the_49_of_already_exists(
        svc: Service) -> None:
    """``budgets create ai/lmm/x`` (ai/lmm a typo of ai/llm) is bad input: exit 2, with
    the error naming ``PATH``, the missing parent and the close name, nothing on stdout;
    a path that exists already still exits 49, so a sync script skipping 49 (already
    there) no longer skips the typo."""
    typo = cli(svc, "root", "budgets", "create", "ai/lmm/x", "--json")
    assert (typo.exit_code, typo.stdout, typo.stderr) == (
        2, "", "Error: PATH: parent 'ai/lmm': unknown budget; did you mean 'ai/llm'? "
               "(HTTP 422)\n")
    exists = cli(svc, "root", "budgets", "create", "ai/llm", "--json")
    assert (exists.exit_code, exists.stdout) == (49, "")
