"""The dashboard's weight change with a what-if preview, in a real headless Chromium
(Debian's /usr/bin/chromium, driven by Playwright) against a real ``apportion serve`` over
four days of fake-clock history made by the service's own scheduler (as in test_whatif.py).

carol manages ``ai`` (so she may set the weights of ai/llm and ai/vision, not ai's own, a
top-level weight); alice is a member only; ops is a second top-level node with no work.
Screenshots go to test-artifacts/screenshots/ for a person to look at.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import Server, free_port
from test_dashboard_browser import browser, page  # noqa: F401 (fixtures)
from test_whatif import DAY, make_history, pooled  # noqa: F401 (pooled: a fixture)

pytestmark = pytest.mark.browser

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
WAIT_MS = 20_000  # a deadline for things to appear, not a speed requirement
REPLAY_MS = 300_000  # a preview replays the whole period twice: a bound on a hang only

CONFIG = """[server]
host = "127.0.0.1"
port = {port}
data_dir = "data"
single_user = true

[database]
url = "sqlite:///{tmp}/a.db"

[executor]
kind = "memory"
grace_s = 0

[scheduler]
interval_s = 1

[[hosts]]
name = "h0"
gpus = 8

[[hosts]]
name = "h1"
gpus = 8

[[budgets]]
path = "ai"
weight = 3
managers = ["carol"]

[[budgets]]
path = "ai/llm"
weight = 2
members = ["alice"]

[[budgets]]
path = "ai/vision"
weight = 1
members = ["alice"]

[[budgets]]
path = "ops"
weight = 1

[[users]]
name = "alice"

[[users]]
name = "carol"

[[users]]
name = "admin"
admin = true
"""


@dataclass(frozen=True)
class Live:
    server: Server

    def get(self, user: str, path: str) -> Any:
        r = httpx.get(
            self.server.url + path,
            timeout=30,
            headers={"Authorization": f"Bearer {self.server.token(user)}"},
        )
        assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text}"
        return r.json()

    def weight(self, path: str) -> float:
        return float(
            next(b["weight"] for b in self.get("admin", "/v1/budgets") if b["path"] == path)
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """Four days of history (ai/llm and ai/vision each submit a 4-GPU, 3 h workload every
    30 min on 16 GPUs), ending a day ago, then a live server on that store."""
    tmp = tmp_path_factory.mktemp("preview")
    config = tmp / "apportion.toml"
    config.write_text(CONFIG.format(port=free_port(), tmp=tmp))
    make_history(config, time.time() - 5 * DAY, 4.0)
    server = Server(config, tmp / "server.log")
    server.start()
    try:
        yield Live(server)
    finally:
        server.stop()


def _shot(pg: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / name), full_page=True)


def _open(pg: Any, live: Live, user: str) -> None:
    pg.goto(live.server.url + "/#token=" + live.server.token(user))
    pg.wait_for_selector('#budgets tbody tr[data-path="ops"]', timeout=WAIT_MS)


def _cells(pg: Any, selector: str) -> list[list[str]]:
    rows: list[list[str]] = pg.eval_on_selector_all(
        selector, "trs => trs.map(r => [...r.cells].map(c => c.innerText.trim()))"
    )
    return rows


def _pct(v: float | None) -> str:
    """A fraction as dashboard.js prints it: ``(100 * v).toFixed(1) + "%"``, or below
    0.05% (not 0) two significant digits."""
    if v is None:
        return "-"
    p = 100 * v
    return f"{float(f'{p:.2g}'):g}%" if p != 0 and abs(p) < 0.05 else f"{p:.1f}%"


def test_controls_follow_the_rights(live: Live) -> None:
    """/v1/dashboard/controls lists the weights each user may set: a manager of ai those
    below ai, an admin every node, a member none."""
    assert live.get("carol", "/v1/dashboard/controls") == {
        "user": "carol",
        "admin": False,
        "set_weight": ["ai/llm", "ai/vision"],
    }
    assert live.get("admin", "/v1/dashboard/controls")["set_weight"] == [
        "ai",
        "ai/llm",
        "ai/vision",
        "ops",
    ]
    assert live.get("alice", "/v1/dashboard/controls")["set_weight"] == []


def test_a_member_sees_no_weight_controls(live: Live, page: Any) -> None:  # noqa: F811 (page)
    """alice (a member, managing nothing) sees the budgets with their weights, and no
    control to change one: no "change" button, no editor."""
    _open(page, live, "alice")
    page.wait_for_selector('#budgets tbody tr[data-path="ai/vision"]', timeout=WAIT_MS)
    page.wait_for_load_state("networkidle")  # the controls' answer has arrived
    weights = [r[1] for r in _cells(page, "#budgets tbody tr[data-path]")]
    assert weights == [f"{b['weight']:g}" for b in live.get("alice", "/v1/budgets")]
    assert page.locator("#budgets button[data-edit]").count() == 0
    assert page.locator("#weight-editor").is_hidden()


def test_manager_previews_then_applies_a_weight(live: Live, page: Any) -> None:  # noqa: F811 (page)
    """carol (manager of ai) gets a "change" control on ai/llm and ai/vision only; she sets
    ai/vision to 4 and presses Preview: the page says it is running, then shows the table
    POST /v1/whatif answered, row for row, for her subtree (not ops), ai/vision highlighted,
    delivered more GPU-hours with shorter waits, marked better; nothing is changed until she
    presses Apply, which sets the weight (the budgets table and the audit log show it)."""
    _open(page, live, "carol")
    page.wait_for_selector('#budgets button[data-edit="ai/vision"]', timeout=WAIT_MS)
    editable = page.eval_on_selector_all(
        "#budgets button[data-edit]", "bs => bs.map(b => b.dataset.edit)"
    )
    assert editable == ["ai/llm", "ai/vision"]
    page.click('#budgets button[data-edit="ai/vision"]')
    assert page.inner_text("#we-path") == "ai/vision"
    assert page.input_value("#we-weight") == "1"
    assert page.input_value("#we-days") == "14"  # the default period
    page.fill("#we-weight", "0.0004")  # a small weight is shown as it is, not as 0
    assert page.inner_text("#we-apply") == "Apply weight 0.0004"
    page.fill("#we-weight", "4")
    assert page.inner_text("#we-apply") == "Apply weight 4"

    # the what-if request is held in the browser until the running state has been looked
    # at (a replay of four days lasts a fraction of a second), then let go unchanged
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    page.route("**/v1/whatif", hold)
    with page.expect_response(lambda r: r.url.endswith("/v1/whatif"), timeout=REPLAY_MS) as answer:
        page.click("#we-preview")
        page.wait_for_selector("#weight-editor.running", timeout=WAIT_MS)
        assert page.inner_text("#we-status").startswith("Running: replaying the last 14 days twice")
        assert page.is_disabled("#we-preview")
        assert len(held) == 1  # the page is waiting for the server's answer
        held[0].continue_()
    page.unroute("**/v1/whatif")
    # (that the server answers other requests during a replay is test_whatif.py's
    # test_the_server_answers_other_requests_while_a_whatif_replays)
    assert answer.value.status == 200
    assert answer.value.request.post_data_json == {"since": "14d", "set_weight": {"ai/vision": 4}}
    result = answer.value.json()
    page.wait_for_selector("#we-result:not([hidden])", timeout=WAIT_MS)
    assert "Nothing is changed until you press Apply" in page.inner_text("#we-status")
    assert live.weight("ai/vision") == 1.0  # a preview changes nothing

    rows = _cells(page, "#we-table tbody tr")
    assert [r[0] for r in rows] == ["ai", "ai/llm", "ai/vision"]  # her subtree: no ops
    for cells, b in zip(rows, result["budgets"], strict=True):
        assert cells[2:4] == [_pct(b["current"]["attainment"]), _pct(b["proposed"]["attainment"])]
        assert cells[10:12] == [str(b["current"]["preemptions"]), str(b["proposed"]["preemptions"])]
    assert page.eval_on_selector_all(
        "#we-table tbody tr.changed", "trs => trs.map(r => r.dataset.path)"
    ) == ["ai/vision"]
    # the whole cluster's attainment, labelled: per team, then per researcher
    foot, sides = _cells(page, "#we-table tfoot tr"), result["overall"]
    assert [r[0] for r in foot] == ["overall (whole cluster), attainment per team",
                                    "attainment per researcher"]
    for cells, key in zip(foot, ("attainment_teams", "attainment"), strict=True):
        assert cells[2:4] == [_pct(sides["current"][key]), _pct(sides["proposed"][key])]
    vision = next(b for b in result["budgets"] if b["budget"] == "ai/vision")
    assert rows[2][1] == "1 \u2192 4"
    # four times the weight: more GPU-hours delivered, shorter waits (its attainment, on
    # what it is owed, was 100% already: its share of 16 GPUs is 4, its demand 24)
    assert vision["proposed"]["delivered_gpu_hours"] > vision["current"]["delivered_gpu_hours"]
    assert vision["proposed"]["wait_p90_s"] < vision["current"]["wait_p90_s"]
    marks = page.eval_on_selector_all(
        '#we-table tr[data-path="ai/vision"] td.proposed', "tds => tds.map(td => td.className)"
    )
    assert ["better" in m for m in marks[1:4]] == [True, True, True]  # delivered, waits
    # attainment is against each run's own shares: never marked, and the note says why
    assert not ({"better", "worse"} & set(marks[0].split()))
    assert "it is not marked better or worse" in page.inner_text("#we-period")
    # figures that read the same as shown are not marked: 1.84 and 1.76 both show 1.8
    assert page.evaluate("() => cmpClass(1.84, 1.76, true, (v) => num(v, 1))") == ""
    assert page.evaluate("() => cmpClass(1.84, 1.66, true, (v) => num(v, 1))") == "worse"
    assert f"{result['period']['workloads']} workloads" in page.inner_text("#we-period")
    first, end = result["period"]["first_submission"], result["period"]["end"]
    replayed = page.evaluate("([first, end]) => `Replayed ${dur(end - first)} of this cluster's "
                             "history, from its first submission at ${clockTime(first)} to now: `",
                             [first, end])
    assert replayed.startswith("Replayed 5 d of this cluster's history, from its first "
                               "submission at ")
    assert page.inner_text("#we-period").startswith(f"Proposed: ai/vision = 4. {replayed}")
    _shot(page, "dashboard-preview.png")

    page.click("#we-apply")
    page.wait_for_function(
        "() => document.querySelector('#we-status').innerText.startsWith('Applied')",
        timeout=WAIT_MS,
    )
    assert live.weight("ai/vision") == 4.0
    page.wait_for_function(
        "() => document.querySelector('#budgets tr[data-path=\"ai/vision\"] td:nth-child(2)')"
        ".innerText.startsWith('4')",
        timeout=WAIT_MS,
    )
    page.wait_for_selector('#audit tbody td:has-text("budget.weight")', timeout=WAIT_MS)
    audit = _cells(page, "#audit tbody tr")
    assert audit[0][1:4] == ["carol", "budget.weight", "ai/vision"]


def _outside(pg: Any, cells: str, right: float) -> list[str]:
    """The texts of the ``cells`` whose box ends right of ``right`` (or starts left of 0)."""
    out: list[str] = pg.eval_on_selector_all(cells, """(cs, right) => cs.filter((c) => {
        const b = c.getBoundingClientRect();
        return b.left < 0 || b.right > right + 0.5;
    }).map((c) => c.innerText.trim())""", right)
    return out


def test_the_preview_table_fits_a_desktop_and_shows_its_first_figures_on_a_phone(
    live: Live, page: Any,  # noqa: F811 (page)
) -> None:
    """At 1440 px every column of the preview's table is inside its panel (the preemptions
    were cut off at the right: the first column took the width of the overall row's long
    label, which now wraps), and so is its heading's "Change a weight:"; at 375 px the
    budget, its weight and the first current/proposed pair (attainment) are on the screen
    (only the budget column was)."""
    _open(page, live, "carol")
    page.click('#budgets button[data-edit="ai/llm"]', timeout=WAIT_MS)
    page.fill("#we-weight", "3")
    with page.expect_response(lambda r: r.url.endswith("/v1/whatif"), timeout=REPLAY_MS):
        page.click("#we-preview")
    page.wait_for_selector("#we-result:not([hidden])", timeout=WAIT_MS)
    panel = page.locator("#weight-editor").bounding_box()
    assert panel is not None
    assert _outside(page, "#we-table th, #we-table td", panel["x"] + panel["width"]) == []
    page.locator("#weight-editor").screenshot(path=str(SHOTS / "dashboard-preview-desktop.png"))

    page.set_viewport_size({"width": 375, "height": 780})
    first = ("#we-table :is(tbody, tfoot) tr > :nth-child(-n+4):not([colspan]), "
             "#we-table thead tr:first-child > :nth-child(-n+3), "
             "#we-table thead tr:last-child > :nth-child(-n+2)")
    assert _outside(page, first, 375) == []
    heading = page.locator("#weight-editor > h2").bounding_box()
    assert heading is not None and heading["x"] + heading["width"] <= 375
    assert page.evaluate("""() => { const r = document.createRange();
        r.selectNodeContents(document.querySelector("#weight-editor > h2").firstChild);
        return r.getClientRects().length; }""") == 1  # "Change a weight:" on one line
    page.locator("#we-table").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "dashboard-preview-phone.png"))


def test_a_preview_with_a_drain_says_what_the_replays_pool_occupancy_counts(
    live: Live, page: Any,  # noqa: F811 (page)
) -> None:
    """A several-pool preview whose period had a host event shows each pool's occupancy as
    the replay's (108.8% where a host drained), and under the pools why it can exceed 100%
    and that apportion report usage leaves that work out; without host events, no note.
    (The page draws the answer it is given: here one made up, for the figures.)"""
    _open(page, live, "carol")
    side = {"occupancy": 1.088, "delivered_gpu_hours": 10.0, "attainment": 0.9,
            "wait_p50_s": 60.0, "preemptions": 1}
    figures = {"attainment": 0.9, "attainment_teams": 0.9, "wait_p90_s": 60.0, "preemptions": 1}
    answer = {
        "set_weight": {"ai/llm": 3}, "budgets": [],
        "overall": {"current": figures, "proposed": figures},
        "period": {"start": 0.0, "end": 86400.0, "first_submission": 86280.0, "days": 0.0014,
                   "workloads": 5, "host_events": 1, "running_at_end": 0, "waiting_at_end": 0,
                   "in_former_leaves": {}},
        "pools": [{"pool": "east/H100", "gpus": 32, "current": side, "proposed": side,
                   "budgets": []}],
    }

    def drawn(host_events: int) -> str:
        answer["period"]["host_events"] = host_events  # type: ignore[index]
        text: str = page.evaluate("""(res) => {
            renderPreview(res, "ai/llm");
            return document.querySelector("#we-result").innerText;
        }""", answer)
        return text

    text = drawn(1)
    assert "Replayed 2 min of this cluster's history, from its first submission at " in text
    assert "Pool east/H100 32 GPUs; replay occupancy 108.8% \u2192 108.8%" in text
    assert text.rstrip().endswith(
        "Replay occupancy: assigned GPUs over healthy GPUs, as the simulator counts them; work "
        "still running on draining hosts counts as assigned while the host is not healthy: "
        "this can exceed 100%; apportion report usage leaves it out of both.")
    assert "apportion report usage" not in drawn(0)


def test_preview_errors_are_shown_on_the_page(live: Live, page: Any) -> None:  # noqa: F811 (page)
    """Nothing to replay (the last day has no submission: the history ended a day ago), a
    weight of 0, and an empty weight each give a message on the page in the server's (or the
    field's) words, no table; the page keeps working."""
    _open(page, live, "carol")
    page.wait_for_selector('#budgets button[data-edit="ai/llm"]', timeout=WAIT_MS)
    page.click('#budgets button[data-edit="ai/llm"]')
    page.select_option("#we-days", "1")
    page.click("#we-preview")
    page.wait_for_selector("#we-error:has-text('Preview failed')", timeout=REPLAY_MS)
    utc = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00"  # the same for every reader: UTC
    assert re.fullmatch(
        rf"Preview failed: period: no workload was submitted in the 1 d from {utc} to {utc}: "
        r"nothing to replay", page.inner_text("#we-error"))
    assert page.locator("#we-result").is_hidden()
    _shot(page, "dashboard-preview-error.png")
    page.select_option("#we-days", "14")
    page.fill("#we-weight", "0")
    page.click("#we-preview")
    page.wait_for_selector("#we-error:has-text('Preview failed')", timeout=REPLAY_MS)
    assert page.inner_text("#we-error") == (
        "Preview failed: set_weight.ai/llm: Input should be greater than or equal to 0.000001"
    )
    page.fill("#we-weight", "")
    page.click("#we-preview")
    assert page.inner_text("#we-error") == "weight: enter a number greater than 0"
    page.click("#we-close")
    assert page.locator("#weight-editor").is_hidden()


def test_preview_on_two_pools_shows_a_table_per_pool(pooled: Any, page: Any) -> None:  # noqa: F811
    """On the two-pool server (test_whatif's: east/H100 and west/B200), the admin previews
    ai/vision = 4: after the overall table the page shows one table per pool, in the
    answer's order, each with the rows POST /v1/whatif gave for that pool (attainment,
    delivered GPU-hours, wait p50, preemptions, current and proposed), ai/vision highlighted,
    the whole pool's figures below and its occupancy in the heading; on east/H100, where
    ai/vision's work moves, its delivered GPU-hours are marked better."""
    page.goto(pooled.server.url + "/#token=" + pooled.server.token("admin"))
    page.wait_for_selector('#budgets button[data-edit="ai/vision"]', timeout=WAIT_MS)
    page.click('#budgets button[data-edit="ai/vision"]')
    page.fill("#we-weight", "4")
    with page.expect_response(lambda r: r.url.endswith("/v1/whatif"), timeout=REPLAY_MS) as answer:
        page.click("#we-preview")
    assert answer.value.status == 200
    result = answer.value.json()
    page.wait_for_selector("#we-result:not([hidden])", timeout=WAIT_MS)
    tables = page.eval_on_selector_all("#we-pools table", "ts => ts.map(t => t.dataset.pool)")
    assert tables == [p["pool"] for p in result["pools"]] == ["east/H100", "west/B200"]
    for pool in result["pools"]:
        at = f'#we-pools table[data-pool="{pool["pool"]}"]'
        rows = _cells(page, f"{at} tbody tr")
        assert [r[0] for r in rows] == [b["budget"] for b in pool["budgets"]]
        for cells, b in zip(rows, pool["budgets"], strict=True):
            c, q = b["current"], b["proposed"]
            assert cells[1:3] == [_pct(c["attainment"]), _pct(q["attainment"])]
            assert cells[7:9] == [str(c["preemptions"]), str(q["preemptions"])]
        (foot,) = _cells(page, f"{at} tfoot tr")
        assert foot[0] == "whole pool"
        assert foot[1:3] == [_pct(pool["current"]["attainment"]),
                             _pct(pool["proposed"]["attainment"])]
        assert page.eval_on_selector_all(f"{at} tbody tr.changed",
                                         "trs => trs.map(r => r.dataset.path)") == ["ai/vision"]
    headings = [page.inner_text(h) for h in ("#we-pools h3 >> nth=0", "#we-pools h3 >> nth=1")]
    for heading, pool in zip(headings, result["pools"], strict=True):
        assert heading.startswith(f"Pool {pool['pool']} {pool['gpus']} GPUs; replay occupancy "
                                  f"{_pct(pool['current']['occupancy'])} \u2192 "
                                  f"{_pct(pool['proposed']['occupancy'])}"), heading
    east = next(p for p in result["pools"] if p["pool"] == "east/H100")
    vision = next(b for b in east["budgets"] if b["budget"] == "ai/vision")
    assert vision["proposed"]["delivered_gpu_hours"] > vision["current"]["delivered_gpu_hours"]
    delivered = page.get_attribute('#we-pools table[data-pool="east/H100"] '
                                   'tr[data-path="ai/vision"] td:nth-child(5)', "class")
    assert delivered is not None and "better" in delivered
    _shot(page, "dashboard-preview-pools.png")
