"""Budget routes: the tree, usage, creating nodes, weights, members and managers."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies made from the Api context.
from typing import Annotated

from fastapi import APIRouter, Depends

from apportion.core import (
    BudgetTree,
    CoreError,
    HostState,
    ancestors,
    usage_ratio,
)

from ..auth import Principal, weight_owner
from ..bodies import CreateBudgetBody, ManagersBody, MembersBody, WeightBody
from ..config import ServiceConfig
from ..replies import (
    Budget,
    BudgetCreated,
    BudgetUsage,
    NodeUsage,
    QueueBudget,
    QueueView,
)
from ..store import BudgetRow, Conflict, Store, UnknownParent, UserRow
from .context import V1, Api, fail


def router(api: Api) -> APIRouter:
    """``/v1/budgets`` and below."""
    router = APIRouter()
    store, scheduler, settings, now = api.store, api.scheduler, api.settings, api.now
    rights, forbid, people = api.rights, api.forbid, api.people
    Reader = Annotated[Principal, Depends(api.principal)]
    User = Annotated[UserRow, Depends(api.writer)]
    v1 = V1

    @router.get(f"{v1}/budgets", tags=["budgets"])
    def budgets(_who: Reader) -> list[Budget]:
        """The budget tree, parents first: weight, share of the cluster, managers, members."""
        rows = store.budgets()
        if not rows:
            return []
        tree = store.load_tree()
        return [_node(b, tree) for b in rows]

    @router.get(f"{v1}/budgets/usage", tags=["budgets"])
    def usage(who: Reader) -> BudgetUsage:
        """Charged and free GPU-hours of every node over the lookback window, and its usage
        ratio (charged / (share x healthy GPU-hours))."""
        return _usage(store, settings, now(), scheduler.queue_view(who.name))

    @router.post(f"{v1}/budgets", status_code=201, tags=["budgets"])
    def create_budget(body: CreateBudgetBody, user: User) -> BudgetCreated:
        """Create a node below an existing one (admin: also at the top)."""
        if not rights(user).can_create(body.path):
            raise forbid(user, f"create budget {body.path}")
        people("managers", body.managers)
        people("members", body.members)
        try:
            b = store.add_budget(body.path, body.weight, actor=user.name,
                                 managers=body.managers, members=body.members)
        except UnknownParent as e:  # bad input naming no budget, as a submission's is
            raise fail(422, f"path: {e}") from None
        except Conflict as e:
            if "weight" in str(e):  # a share too small: invalid input, not a state
                raise fail(422, f"weight: {e}") from None
            raise
        scheduler.wake(by=user.name)
        return BudgetCreated.of(b)

    @router.patch(f"{v1}/budgets/{{path:path}}", tags=["budgets"])
    def set_weight(path: str, body: WeightBody, user: User) -> Budget:
        """Change a node's weight (its parent's manager, or an admin)."""
        store.get_budget(path)
        if not rights(user).can_set_weight(path):
            raise forbid(user, f"change the weight of budget {path} ({weight_owner(path)})")
        try:
            store.load_tree().with_weight(path, body.weight)
        except CoreError as e:
            raise fail(422, f"weight: {e}") from None
        b = store.set_budget_weight(path, body.weight, actor=user.name)
        scheduler.wake(by=user.name)
        return _node(b, store.load_tree())

    @router.put(f"{v1}/budgets/{{path:path}}/members", tags=["budgets"])
    def set_members(path: str, body: MembersBody, user: User) -> Budget:
        """Replace a node's members (existing users)."""
        store.get_budget(path)
        if not rights(user).can_set_people(path):
            raise forbid(user, f"change the members of budget {path}")
        people("members", body.members)
        b = store.set_budget_members(path, body.members, actor=user.name)
        return _node(b, store.load_tree())

    @router.put(f"{v1}/budgets/{{path:path}}/managers", tags=["budgets"])
    def set_managers(path: str, body: ManagersBody, user: User) -> Budget:
        """Replace a node's managers (existing users)."""
        store.get_budget(path)
        if not rights(user).can_set_people(path):
            raise forbid(user, f"change the managers of budget {path}")
        people("managers", body.managers)
        b = store.set_budget_managers(path, body.managers, actor=user.name)
        return _node(b, store.load_tree())

    return router


def _node(b: BudgetRow, tree: BudgetTree) -> Budget:
    """A node as ``GET /v1/budgets`` lists it, and as a change of it answers."""
    return Budget(path=b.path, parent=b.parent, weight=b.weight, share=tree.share(b.path),
                  leaf=tree.is_leaf(b.path), managers=list(b.managers), members=list(b.members))


def _usage(
    store: Store, settings: ServiceConfig, now: float, view: QueueView | None = None
) -> BudgetUsage:
    """Per-node usage over the lookback. Ratios, charged units and capacity come from the
    scheduler's ledger when it is running (``view``: its queue view), and charged GPU-hours
    too where no GPU kind is billed (a unit is then a GPU-second); else from the attempts
    in the store, with capacity taken as the healthy GPUs now times the window (the store
    keeps no per-second host history). Free GPU-hours always come from the store."""
    window = settings.policy.lookback
    since = now - window
    billed = any(w != 1.0 for w in settings.pools.billing.values())
    rows = store.budgets()
    if not rows:
        return BudgetUsage(lookback_s=window, capacity_gpu_hours=0.0, source="store",
                           billed=billed, budgets=[])
    tree = store.load_tree()
    charged: dict[str, float] = {}
    free: dict[str, float] = {}
    for u in store.usage_intervals(since):
        end = now if u.ended_at is None else min(u.ended_at, now)
        seconds = max(0.0, end - max(u.started_at, since)) * u.gpus_held
        table = charged if u.allocated else free
        for node in ancestors(u.budget)[:-1]:
            table[node] = table.get(node, 0.0) + seconds
    healthy = sum(h.gpus for h in store.hosts() if h.state is HostState.HEALTHY)
    capacity = healthy * window
    live: dict[str, QueueBudget] = {}
    if view is not None and view.now is not None:
        live = {b.path: b for b in view.budgets}
        if view.capacity_gpu_s is not None:  # the ratios' own denominator
            capacity = view.capacity_gpu_s
    out = []
    for path in tree.nodes():
        c = charged.get(path, 0.0)  # GPU-seconds, whatever their kind
        units: float | None = None if billed else c
        ratio = usage_ratio(c, tree.share(path), capacity) if capacity > 0 else None
        if path in live:  # the ledger counts billed units, as the ratios do
            units, ratio = live[path].charged_gpu_s, live[path].usage_ratio
            if not billed:  # a unit is a GPU-second: one reading of the ledger for both
                c = units
        out.append(NodeUsage(
            budget=path, path=path, share=tree.share(path), charged_gpu_hours=c / 3600.0,
            charged_units=None if units is None else units / 3600.0,
            free_gpu_hours=free.get(path, 0.0) / 3600.0, usage_ratio=ratio))
    return BudgetUsage(lookback_s=window, capacity_gpu_hours=capacity / 3600.0,
                       source="scheduler" if live else "store", billed=billed, budgets=out)
