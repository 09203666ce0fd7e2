"""The typed ``why`` replies (service/replies.py) carry everything core's explanation has:
every field of ``core.explain``'s dataclasses has a field of the same name in its reply
model, and real replies (waiting, running and ended work, on the situation of
test_metrics) parse into the models and dump back to the same JSON, key for key and in
order. A field core adds to its explanation fails here until the reply model has it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter
from test_metrics import Live, live

from apportion.core import explain
from apportion.core.explain import Advice, Explanation, Rival, Victim
from apportion.core.fleet import pool_config
from apportion.service.replies import (
    Why,
    WhyAdvice,
    WhyExplanation,
    WhyHistory,
    WhyRival,
    WhyVictim,
)

__all__ = ["live"]  # a fixture (test_metrics.py), used by name


@pytest.mark.parametrize(("core", "model"), [
    (Explanation, WhyExplanation), (Rival, WhyRival), (Victim, WhyVictim),
    (Advice, WhyAdvice)])
def test_reply_model_has_every_field_of_core_explanation(
        core: type, model: type[BaseModel]) -> None:
    """Each field of the core dataclass (read from the dataclass itself, not a list kept
    here) is a field of the reply model that mirrors it."""
    missing = {f.name for f in dataclasses.fields(core)} - set(model.model_fields)
    assert not missing, f"{model.__name__} lacks {sorted(missing)} of core's {core.__name__}"


def _core_explanation(live: Live, wid: str) -> dict[str, Any]:
    """What core itself says of ``wid`` now (``Explanation.as_dict``), asked as the service
    asks it."""
    with live.sched.lock:
        st = live.sched.state
        assert st is not None
        pool = st.runs_in(wid) or st.waits_in(wid)[0]
        now = max(live.sched.clock.now(), st.time)
        return explain(st.pools[pool], now, pool_config(st, pool, live.sched.config),
                       wid).as_dict()


def _missing(core: Any, wire: Any, where: str = "") -> list[str]:
    """Keys of ``core`` (recursively, into lists of dicts) absent from ``wire``."""
    if isinstance(core, dict) and isinstance(wire, dict):
        return [m for k, v in core.items()
                for m in ([f"{where}{k}"] if k not in wire
                          else _missing(v, wire[k], f"{where}{k}."))]
    if isinstance(core, list) and isinstance(wire, list) and len(core) == len(wire):
        return [m for n, (c, w) in enumerate(zip(core, wire, strict=True))
                for m in _missing(c, w, f"{where}{n}.")]
    return []


def test_why_replies_carry_every_key_of_core_explanation(live: Live) -> None:
    """B (waiting behind a victim) and C (running): the reply holds every key of core's own
    ``Explanation.as_dict`` for that workload, nested ones included, with core's values
    (``text`` aside: the service adds its pool advice and clock times); U (ended) answers
    its history. Each reply parses into ``Why`` and dumps back identical, keys in order."""
    adapter: TypeAdapter[WhyExplanation | WhyHistory] = TypeAdapter(Why)
    kinds = {}
    for name in ("B", "C", "U"):
        wid = live.ids[name]
        r = live.client.get(f"/v1/workloads/{wid}/why")
        assert r.status_code == 200, r.text
        raw = r.json()
        reply = adapter.validate_python(raw)
        dumped = reply.model_dump(mode="json")
        assert dumped == raw and list(dumped) == list(raw)
        kinds[name] = type(reply)
        if isinstance(reply, WhyExplanation):
            core = _core_explanation(live, wid)
            assert _missing(core, raw) == []
            assert {k: v for k, v in raw.items() if k in core and k != "text"} == {
                k: v for k, v in core.items() if k != "text"}
    assert kinds == {"B": WhyExplanation, "C": WhyExplanation, "U": WhyHistory}
    assert _core_explanation(live, live.ids["B"])["victims"], "B should be blocked by C"
