"""The dashboard's alerts in a real headless Chromium, on the situation of test_metrics (a
real uvicorn, the in-memory executor, a fake clock stepped by hand): what the figures
cannot show, an executor that does not answer and a wall clock set back, is said above
them, and goes away once it is over.

Screenshots go to test-artifacts/screenshots/ for a person to look at.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_dashboard_browser import WAIT_MS, _shot, browser, page  # noqa: F401 (fixtures)
from test_metrics import T0, Live, live  # noqa: F401 (live: a fixture)

from apportion.service.clock import FakeClock
from apportion.service.executors.memory import MemoryExecutor

pytestmark = pytest.mark.browser

ALERTS = "#alerts .alert"


def _alerts(pg: Any) -> list[str]:
    return [str(t) for t in pg.locator(ALERTS).all_inner_texts()]


def test_dashboard_says_when_the_executor_does_not_answer_and_when_it_answers_again(
    live: Live, page: Any  # noqa: F811 (fixtures)
) -> None:
    """The executor stops answering at T0 + 2000 and a pass at T0 + 2010 still finds it
    down: /v1/dashboard/state carries since when and its last answer, and the page shows
    one alert saying for how long (10 s), the answer, and that nothing starts or ends
    meanwhile. The next pass that reaches it clears both."""
    executor = live.sched.executor
    assert isinstance(executor, MemoryExecutor)
    executor.broken = True
    live.at(T0 + 2000)
    live.at(T0 + 2010)
    state = live.client.get("/v1/dashboard/state").json()
    assert (state["executor_down_since"], state["executor_problem"]) == (
        T0 + 2000, "memory executor: backend unavailable")

    page.goto(f"{live.client.base_url}/#token={live.tokens['bob']}")
    page.wait_for_selector(ALERTS, timeout=WAIT_MS)
    assert _alerts(page) == [
        "The executor (memory) has not answered for 10 s: memory executor: backend "
        "unavailable. Nothing starts, stops or ends until it does; waiting work keeps its "
        "place."]
    _shot(page, "dashboard-executor-down.png")

    executor.broken = False
    live.at(T0 + 2020)
    assert live.client.get("/v1/dashboard/state").json()["executor_down_since"] is None
    page.wait_for_selector(ALERTS, state="detached", timeout=WAIT_MS)  # the next poll


def test_dashboard_says_when_the_wall_clock_was_set_back(
    live: Live, page: Any  # noqa: F811 (fixtures)
) -> None:
    """The wall clock is set back 8 minutes behind the latest time the server recorded
    (T0 + 1900, the situation's last pass): the state's ``clock_behind_s`` is 480 and the
    page says the scheduler's time stands still; once the clock is past it again, the
    alert goes."""
    live.clock = live.sched.clock = FakeClock(T0 + 1900 - 480)
    live.sched.step()
    assert live.client.get("/v1/dashboard/state").json()["clock_behind_s"] == 480.0

    page.goto(f"{live.client.base_url}/#token={live.tokens['bob']}")
    page.wait_for_selector(ALERTS, timeout=WAIT_MS)
    assert _alerts(page) == [
        "The server's wall clock is 8 min behind the latest time it recorded (it was set "
        "back): the scheduler's time stands still until the clock catches up."]

    live.at(T0 + 1910)
    assert live.client.get("/v1/dashboard/state").json()["clock_behind_s"] == 0.0
    page.wait_for_selector(ALERTS, state="detached", timeout=WAIT_MS)


def test_a_state_without_the_alert_fields_shows_no_alert(
    live: Live, page: Any  # noqa: F811 (fixtures)
) -> None:
    """A server still running the code of before these fields (upgraded, not yet restarted)
    serves this page a state without executor_down_since, executor_problem and
    clock_behind_s: the page shows no alert (it said the executor had "not answered for -")
    and the rest as usual."""
    def older(route: Any) -> None:
        state = route.fetch().json()
        for name in ("executor_down_since", "executor_problem", "clock_behind_s"):
            del state[name]
        route.fulfill(json=state)

    page.route("**/v1/dashboard/state*", older)
    page.goto(f"{live.client.base_url}/#token={live.tokens['bob']}")
    page.wait_for_selector(f'#queue tbody tr[data-id="{live.ids["B"]}"]', timeout=WAIT_MS)
    page.wait_for_selector("#status.live", timeout=WAIT_MS)
    assert _alerts(page) == []
