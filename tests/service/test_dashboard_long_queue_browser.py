"""The dashboard with more work than it lists, in a real headless Chromium against a real
``apportion serve`` (in-memory executor): the state lists at most 500 rows of the queue and
of running work; the page says so under each table, and a user's own waiting work beyond
those rows is listed all the same.

64 hosts x 8 GPUs; bob's array of 1,020 one-GPU workloads (ai/vision, 1 h) fills the 512
GPUs and leaves 508 waiting; then carol's unallocated workload (ops), which the queue puts
after all allocated work, and one of hers held by a dependency on it, last of all.
Screenshots go to test-artifacts/screenshots/ for a person to look at.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_dashboard_browser import (  # noqa: F401 (browser, page: fixtures)
    CONFIG,
    WAIT_MS,
    Served,
    _shot,
    _until,
    browser,
    page,
    serving,
)

pytestmark = pytest.mark.browser

HOSTS = "".join(f'[[hosts]]\nname = "n{i:02}"\ngpus = 8\n' for i in range(64))
CROWDED = CONFIG.replace('[[hosts]]\nname = "h1"\ngpus = 8\n[[hosts]]\nname = "h2"\ngpus = 8\n',
                         HOSTS)


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The situation of the module's docstring, once every GPU is taken."""
    d = tmp_path_factory.mktemp("crowded")
    assert CROWDED != CONFIG
    with serving(d, CROWDED) as s:
        s.call("bob", "POST", "/v1/workloads", {
            "budget": "ai/vision", "gpus": 1, "min_runtime": "1h", "array": "0-1019",
            "command": ["sleep", "infinity"]})
        _until("512 running", lambda: s.state()["cluster"]["running"] == 512,
               d / "server.log")
        s.ids["unallocated"] = s.submit("carol", "ops", 8, "0")
        body = {"budget": "ops", "gpus": 8, "min_runtime": "0", "command": ["true"],
                "dependency": f"afterok:{s.ids['unallocated']}"}
        s.ids["held"] = str(s.call("carol", "POST", "/v1/workloads", body)["id"])
        _until("carol's work seen by a pass",
               lambda: (c := s.state()["cluster"])["pending"] == 509 and c["held"] == 1,
               d / "server.log")
        yield s


def _open(pg: Any, s: Served, user: str) -> None:
    pg.goto(s.url + "/#token=" + s.tokens[user])
    pg.wait_for_selector("#queue tbody tr[data-id]", timeout=WAIT_MS)


def test_a_cut_queue_and_running_table_say_how_many_they_show(
    crowded: Served, page: Any  # noqa: F811 (a fixture)
) -> None:
    """For alice, who has no work: the queue table has the first 500 of the 510 pending
    workloads (509 queued + 1 held) and under it "showing 500 of 510 (apportion queue
    lists all)"; the running table the same for its 512. Nothing past the cut is listed."""
    _open(page, crowded, "alice")
    page.wait_for_selector("#queue-note:not([hidden])", timeout=WAIT_MS)
    assert page.locator("#queue tbody tr[data-id]").count() == 500
    assert page.locator("#queue tbody tr.gap").count() == 0
    assert page.inner_text("#queue-note") == "showing 500 of 510 (apportion queue lists all)"
    assert page.inner_text("#c-pending") == "509 + 1 held"
    assert page.locator("#running tbody tr[data-id]").count() == 500
    assert page.inner_text("#running-note") == \
        "showing 500 of 512 (apportion queue lists all)"
    assert page.locator(f'#queue tr[data-id="{crowded.ids["unallocated"]}"]').count() == 0


def test_a_users_own_waiting_work_past_the_cut_is_listed_with_its_place(
    crowded: Served, page: Any  # noqa: F811 (a fixture)
) -> None:
    """For carol, whose two workloads come after the first 500: a row saying how many are
    not listed (8, the rest of bob's), then her unallocated workload at its place (509) and
    her held one (no place, "held"); one of them opens its explanation when clicked, and
    the note counts her rows in."""
    ids = crowded.ids
    _open(page, crowded, "carol")
    mine = f'#queue tbody tr[data-id="{ids["unallocated"]}"]'
    page.wait_for_selector(mine, timeout=WAIT_MS)  # after the page learnt who it is
    rows = page.eval_on_selector_all(
        "#queue tbody tr", "trs => trs.slice(499).map(r => r.dataset.id || r.innerText)")
    assert rows[1:] == ["8 more not listed; yours follow", ids["unallocated"], ids["held"]]
    assert page.inner_text(f"{mine} td:first-child") == "509"
    held = page.eval_on_selector_all(f'#queue tbody tr[data-id="{ids["held"]}"] td',
                                     "tds => tds.map(td => td.innerText)")
    assert (held[0], held[-1]) == ("-", "held")
    assert page.inner_text("#queue-note") == "showing 502 of 510 (apportion queue lists all)"
    page.click(mine)
    page.wait_for_selector(f'#queue tr.why[data-why="{ids["unallocated"]}"] li',
                           timeout=WAIT_MS)
    page.eval_on_selector("#queue .scroll", "el => { el.scrollTop = el.scrollHeight; }")
    _shot(page, "dashboard-long-queue.png")
