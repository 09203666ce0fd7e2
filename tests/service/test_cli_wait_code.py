"""The exit code of ``apportion submit --wait`` (``cli.jobs.wait_for``): the outcome decides
(docs/cli.md, ``--wait``), whatever code the executor recorded."""

from __future__ import annotations

from typing import Any, cast

import pytest

from apportion.cli.client import Client
from apportion.cli.jobs import wait_for


class _Ended:
    """A client whose one workload has already ended as given."""

    def __init__(self, status: str, exit_code: int | None) -> None:
        self.workload = {"id": "w-000001", "status": status, "exit_code": exit_code,
                         "end_reason": status, "attempt": None, "attempts_count": 1}

    def json(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", "/workloads/w-000001")
        return self.workload


@pytest.mark.parametrize(("status", "code", "leaves_with"), [
    ("completed", 0, 0),
    ("failed", 7, 7),
    ("failed", 137, 137),  # its own death by SIGKILL, as a shell reports it
    ("failed", -9, 1),  # the local executor's signal: no code of its own
    ("failed", None, 1),
    # stopped by apportion: the signal of the stop shows in Slurm's code (128 + 15)
    ("cancelled", 143, 1),
    ("timeout", 143, 1),
    ("preempted", 143, 1),
    ("lost", None, 1),
])
def test_wait_leaves_with_the_code_of_a_failure_and_1_for_an_end_not_its_own(
    status: str, code: int | None, leaves_with: int
) -> None:
    """`submit --wait` leaves with the workload's code when it completed or failed by
    itself, and 1 when it ended without a code of its own (cancelled, preempted, lost,
    timeout), even if the executor recorded the stop's signal as 143."""
    client = cast(Client, _Ended(status, code))
    assert wait_for(client, ["w-000001"], lambda _: None, poll_s=0) == leaves_with


def _flaky_client(failures: list[str], workload: dict[str, Any]) -> Client:
    """A real Client over an in-memory transport that fails as ``failures`` say, one per
    request (``refused``, ``timeout``, ``503``), then answers ``workload``."""
    import httpx

    def answer(request: httpx.Request) -> httpx.Response:
        if failures:
            failure = failures.pop(0)
            if failure == "refused":
                raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
            if failure == "timeout":
                raise httpx.ReadTimeout("timed out", request=request)
            return httpx.Response(503, json={"detail": "database: connection failed"})
        return httpx.Response(200, json=workload)

    client = Client("http://apportion.invalid", "t")
    client.http = httpx.Client(base_url=client.url, transport=httpx.MockTransport(answer))
    return client


def test_wait_polls_through_a_server_outage_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`submit --wait` keeps asking a server that refuses connections, times out or answers
    5xx (a restart), says "server unreachable, retrying" on stderr once for the outage, and
    leaves with the job's own code once the server answers again (it left with 1 at the
    first refused connection)."""
    monkeypatch.setattr("apportion.cli.client.RETRY_WAITS", (0.001,))
    ended = {"id": "w-000001", "status": "failed", "exit_code": 5, "end_reason": "exited 5",
             "attempt": None, "attempts_count": 1}
    client = _flaky_client(["refused", "timeout", "503", "refused"], ended)
    assert wait_for(client, ["w-000001"], lambda _: None, poll_s=0) == 5
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith("apportion: server unreachable, retrying")


def test_wait_gives_up_on_a_server_down_for_the_whole_outage_time_with_code_50(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that does not answer for ``OUTAGE_S`` ends the wait with exit code 50
    (server unreachable), not 1, the code of work that ended without a code of its own."""
    from apportion.cli.client import EXIT_UNREACHABLE, ServerRefused

    monkeypatch.setattr("apportion.cli.client.RETRY_WAITS", (0.001,))
    monkeypatch.setattr("apportion.cli.client.OUTAGE_S", 0.05)
    client = _flaky_client(["refused"] * 100_000, {})
    with pytest.raises(ServerRefused) as e:
        wait_for(client, ["w-000001"], lambda _: None, poll_s=0)
    assert e.value.exit_code == EXIT_UNREACHABLE == 50
