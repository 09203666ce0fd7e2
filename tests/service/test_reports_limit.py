"""How many usage reports the server computes at once (service/reports.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from store_db import ServerThread

from apportion.service import reports
from apportion.service.store import Store


def test_a_report_beyond_the_limit_is_refused_with_429_while_the_others_compute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``MAX_REPORTS`` (2) reports computing, one more is refused at once with 429, a
    message naming the limit and a Retry-After; once they are done, a report is computed
    again. There was no bound: a client retrying a slow report started one more each time
    (three at once took the server to 2.5 GB)."""
    release = threading.Event()
    started = threading.Semaphore(0)

    def slow(*_: Any) -> dict[str, Any]:
        started.release()
        release.wait(30)
        raise reports.ReportError("from: done")  # an answer of its own, without a store

    monkeypatch.setattr(reports, "usage_report", slow)
    app = FastAPI()
    app.include_router(reports.reports_router(Store.__new__(Store), lambda: 1e9,
                                              lambda: None))
    server = ServerThread(app)
    try:
        _ask(server.url, pool_size=reports.MAX_REPORTS, release=release, started=started)
    finally:
        release.set()
        server.stop()


def _ask(url: str, pool_size: int, release: threading.Event,
         started: threading.Semaphore) -> None:
    with httpx.Client(base_url=url, timeout=60) as client, \
            ThreadPoolExecutor(pool_size) as pool:
        busy = [pool.submit(client.get, "/v1/reports/usage") for _ in range(reports.MAX_REPORTS)]
        for _ in range(reports.MAX_REPORTS):
            assert started.acquire(timeout=30)
        r = client.get("/v1/reports/usage")
        assert r.status_code == 429
        assert r.json()["detail"] == ("2 usage reports are being computed already, the "
                                      "server's limit: try again in a while")
        assert r.headers["Retry-After"] == "10"
        release.set()
        assert [f.result().status_code for f in busy] == [422, 422]
        assert client.get("/v1/reports/usage").status_code == 422
