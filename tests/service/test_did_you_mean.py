"""Mistyped budgets and users: the API's 404/409/422 detail and the CLI's message name the
closest existing names (difflib), and say nothing more when none is close. The seeded tree:
ai, ai/llm, ai/vision, ops; users root, carol, dave, alice, bob."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_api import Service, close_service, make_service

from apportion.cli.main import main
from apportion.core.names import did_you_mean

JOB = {"gpus": 1, "min_runtime": 600, "command": ["true"]}


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Service]:
    s = make_service(tmp_path)
    yield s
    close_service(s)


def test_submit_to_a_mistyped_budget_suggests_the_close_one(svc: Service) -> None:
    """ai/lm: 422, "did you mean 'ai/llm'?"; a name like nothing (zzz/qqq): no suggestion."""
    r = svc.call("POST", "/v1/workloads", "alice", {**JOB, "budget": "ai/lm"})
    assert (r.status_code, r.json()["detail"]) == (
        422, "budget 'ai/lm': unknown budget; did you mean 'ai/llm'?")
    r = svc.call("POST", "/v1/workloads", "alice", {**JOB, "budget": "zzz/qqq"})
    assert r.json()["detail"] == "budget 'zzz/qqq': unknown budget"


def test_unknown_budget_in_a_path_is_404_with_a_suggestion(svc: Service) -> None:
    """Changing the weight of ai/visoin: 404 naming ai/vision."""
    r = svc.call("PATCH", "/v1/budgets/ai/visoin", "root", {"weight": 2})
    assert (r.status_code, r.json()["detail"]) == (
        404, "budget ai/visoin: not found; did you mean ai/vision?")


def test_unknown_parent_is_a_422_naming_path_and_the_close_one(svc: Service) -> None:
    """Creating ai/lm/alice under the mistyped parent ai/lm: 422 (bad input, as a
    submission to an unknown budget is; not the 409 of a path that exists already), the
    detail naming the field ``path``, the parent and 'ai/llm'; nothing created."""
    r = svc.call("POST", "/v1/budgets", "root", {"path": "ai/lm/alice"})
    assert (r.status_code, r.json()["detail"]) == (
        422, "path: parent 'ai/lm': unknown budget; did you mean 'ai/llm'?")
    assert "ai/lm/alice" not in [b.path for b in svc.store.budgets()]


def test_unknown_user_suggests_the_close_one(svc: Service) -> None:
    """A token for alcie: 404 naming alice."""
    r = svc.call("POST", "/v1/users/alcie/tokens", "root")
    assert (r.status_code, r.json()["detail"]) == (
        404, "user alcie: not found; did you mean alice?")


def test_cli_prints_the_suggestion_naming_the_flag_or_the_script_line(
    svc: Service, tmp_path: Path,
) -> None:
    """``apportion submit --budget ai/lm``: exit status 2, the message with the suggestion,
    after the flag as typed, or the script line that gave the budget (it named neither)."""
    url = str(svc.client.base_url).rstrip("/")
    r = CliRunner().invoke(main, ["submit", "--budget", "ai/lm", "--gpus", "1",
                                  "--min-runtime", "10m", "--url", url,
                                  "--token", svc.tokens["alice"], "--", "true"])
    assert r.exit_code == 2
    assert r.stderr == ("Error: --budget: budget 'ai/lm': unknown budget; did you mean "
                        "'ai/llm'? (HTTP 422)\n")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#APPORTION --budget ai/lm --gpus 1 --min-runtime 10m\ntrue\n")
    r = CliRunner().invoke(main, ["submit", "--url", url, "--token", svc.tokens["alice"],
                                  str(script)])
    assert r.exit_code == 2
    assert r.stderr == ("Error: job.sh:2: #APPORTION --budget ai/lm: budget 'ai/lm': unknown "
                        "budget; did you mean 'ai/llm'? (HTTP 422)\n")


def test_two_close_names_are_both_offered() -> None:
    """Two equally plausible names are both offered, closest first."""
    assert did_you_mean("ai/vison", ["ai/vision", "ai/visions", "ops"]) == (
        "; did you mean ai/vision or ai/visions?")


def test_a_name_typed_in_another_case_is_offered_the_known_spelling() -> None:
    """A name that differs from a known one only in case (``GPU01`` for host ``gpu01``,
    ``AI/LLM``) is offered it; difflib alone, which compares characters as they are, found
    nothing alike and offered nothing. Names that are alike as typed are offered as before."""
    assert did_you_mean("GPU01", ["gpu01", "gpu02", "ops"]) == "; did you mean gpu01 or gpu02?"
    assert did_you_mean("AI/LLM", ["ai/llm", "ai/vision"], quote=True) == (
        "; did you mean 'ai/llm'?")
    assert did_you_mean("ai/vison", ["ai/vision", "ai/visions", "ops"]) == (
        "; did you mean ai/vision or ai/visions?")
    assert did_you_mean("zzz", ["ai/llm", "ops"]) == ""
