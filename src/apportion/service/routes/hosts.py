"""Host routes: list, drain, repair."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies made from the Api context.
from typing import Annotated

from fastapi import APIRouter, Depends

from apportion.core import CoreError, HostState, Status

from ..auth import Principal
from ..bodies import HostBody
from ..replies import Host, HostInUse
from ..store import HostRow, UserRow
from .context import V1, Api, fail


def router(api: Api) -> APIRouter:
    """``/v1/hosts`` and below."""
    router = APIRouter()
    store, scheduler = api.store, api.scheduler
    pools = api.settings.pools

    def shown(h: HostRow, several: bool) -> Host:
        """The reply; with several pools, the host's pool in it."""
        return Host.of(h, pools.of(h.cluster, h.kind) if several else None)

    def several(rows: list[HostRow]) -> bool:
        return len({pools.of(h.cluster, h.kind) for h in rows}) > 1
    rights, forbid = api.rights, api.forbid
    Reader = Annotated[Principal, Depends(api.principal)]
    User = Annotated[UserRow, Depends(api.writer)]
    v1 = V1

    @router.get(f"{v1}/hosts", tags=["hosts"])
    def hosts(_who: Reader) -> list[HostInUse]:
        """Hosts with their state, the reason of the last change, GPUs in use and, with
        several pools, their cluster, GPU kind and pool."""
        used: dict[str, int] = {}
        for w in store.list_workloads([Status.RUNNING, Status.STOPPING], limit=100_000):
            if w.attempt is not None:
                for host, gpus, _ in w.attempt.placement:
                    used[host] = used.get(host, 0) + gpus
        rows = store.hosts()
        many = several(rows)
        return [HostInUse(**shown(h, many).model_dump(), gpus_used=used.get(h.name, 0))
                for h in rows]

    def _host_change(name: str, to: HostState, body: HostBody, user: UserRow) -> Host:
        if not rights(user).can_change_hosts():
            raise forbid(user, f"change host {name} (admins only)")
        # read, decide and change under the scheduler's lock: a pass in between (a draining
        # host emptied to repair) would make the change one the table does not have
        with scheduler.lock:
            h = store.get_host(name)
            if to is HostState.DRAINING and h.state in (HostState.REPAIR, HostState.DOWN):
                # it takes no work already: answered as it is (its reason kept), not
                # refused as a transition the table does not have
                return shown(h, several(store.hosts()))
            if h.state is to and (to is HostState.HEALTHY or body.reason in ("", h.reason)):
                # already so: nothing to record (its state's time and reason kept, no audit
                # entry); a drain again with a new reason does record the new reason
                return shown(h, several(store.hosts()))
            try:
                scheduler.set_host_state(name, to, body.reason, user.name)
            except CoreError as e:
                raise fail(409, str(e)) from None
            return shown(store.get_host(name), several(store.hosts()))

    @router.post(f"{v1}/hosts/{{name}}/drain", tags=["hosts"])
    def drain(name: str, user: User, body: HostBody | None = None) -> Host:
        """Mark a host unhealthy: no new work; emptied as protections end, then to repair.
        A host already in repair or down is answered as it is."""
        return _host_change(name, HostState.DRAINING, body or HostBody(), user)

    @router.post(f"{v1}/hosts/{{name}}/repair", tags=["hosts"])
    def repair(name: str, user: User, body: HostBody | None = None) -> Host:
        """Mark a host repaired: back to healthy (from repair, down, or calling off a drain).
        A healthy host is answered as it is."""
        return _host_change(name, HostState.HEALTHY, body or HostBody(), user)

    return router
