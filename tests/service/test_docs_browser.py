"""``/docs``, the dashboard and a usage report in a real headless Chromium with every
request that is not to this machine aborted, as on a cluster with no internet. The server
and browser are those of test_dashboard_browser (a real ``apportion serve``). Screenshots go
to test-artifacts/screenshots/ for a person to look at."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from store_db import open_store
from test_accounting import NOW, T0, D, build
from test_dashboard_browser import (  # noqa: F401  (fixtures)
    ARGS,
    WAIT_MS,
    Served,
    _shot,
    browser,
    served,
)

from apportion.service.accounting import to_html, usage_report

pytestmark = pytest.mark.browser
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
LOCAL_SCHEMES = {"file", "data"}  # the saved report page and its embedded plots


@pytest.fixture
def offline(browser: Any) -> Iterator[tuple[Any, list[str]]]:  # noqa: F811
    """A page whose requests to anywhere but this machine are aborted (and listed)."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    blocked: list[str] = []

    def route(r: Any) -> None:
        url = urlparse(r.request.url)
        if url.hostname in LOCAL_HOSTS or url.scheme in LOCAL_SCHEMES:
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield pg, blocked
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def test_docs_render_with_the_network_blocked(served: Served,  # noqa: F811
                                              offline: tuple[Any, list[str]]) -> None:
    """Swagger UI draws the API (its title and the report route among the operations) from
    assets the server itself serves; the page asks nothing of any other host."""
    page, blocked = offline
    page.goto(served.url + "/docs")
    page.wait_for_selector("#swagger-ui .info .title", timeout=WAIT_MS)
    assert "apportion" in page.inner_text("#swagger-ui .info .title")
    page.wait_for_selector('.opblock-summary-path[data-path="/v1/reports/usage"]',
                           timeout=WAIT_MS)
    assert page.locator(".opblock").count() > 20
    assert blocked == []
    _shot(page, "docs-offline.png")


def test_dashboard_renders_with_the_network_blocked(served: Served,  # noqa: F811
                                                    offline: tuple[Any, list[str]]) -> None:
    """The dashboard shows the tree and hosts with nothing fetched from elsewhere."""
    page, blocked = offline
    page.goto(served.url + "/#token=" + served.tokens["bob"])  # data needs a token
    page.wait_for_selector('#budgets tbody tr[data-path="ops"]', timeout=WAIT_MS)
    page.wait_for_selector('#hosts tr[data-host="h2"]', timeout=WAIT_MS)
    assert blocked == []
    _shot(page, "dashboard-offline.png")


def test_usage_report_page_shows_its_plots(tmp_path: Path,
                                           offline: tuple[Any, list[str]]) -> None:
    """The HTML report of the ten hand-built days of test_accounting: three plots, all
    decoded (embedded, nothing fetched), and the table with x/a at 66.7% attainment."""
    page, blocked = offline
    store = open_store("sqlite", tmp_path)
    build(store)
    html = to_html(usage_report(store, T0, T0 + 10 * D, "budget", NOW))
    store.close()
    (tmp_path / "report.html").write_text(html)
    page.goto((tmp_path / "report.html").as_uri())
    page.wait_for_selector("figure img")
    widths = page.eval_on_selector_all("figure img", "imgs => imgs.map(i => i.naturalWidth)")
    assert len(widths) == 3 and all(w > 300 for w in widths), widths
    row = page.inner_text("table tbody tr:nth-child(3)")
    assert row.split("\t")[:2] == ["x/a", "25.0%"] and "66.7%" in row
    assert blocked == []
    _shot(page, "usage-report.png")


def test_usage_report_route_serves_the_page(served: Served) -> None:  # noqa: F811
    """GET /v1/reports/usage?format=html from the live server: an HTML page with plots."""
    r = served.client.get("/v1/reports/usage", params={"from": "1d", "format": "html"},
                          headers={"Authorization": f"Bearer {served.tokens['root']}"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.text.count("<img ") == 3


assert ARGS  # the same browser flags as the dashboard test (imported for its fixtures)
