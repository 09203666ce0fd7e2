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
