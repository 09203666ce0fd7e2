"""The sweep's Ray engine: every point is a Ray task.

Where it runs: the cluster at ``address`` (or RAY_ADDRESS) when one is given, else a local
cluster started for the sweep by ``ray.init()`` in this process, on loopback, with its own
temporary directory, and stopped by ``ray.shutdown()`` when the sweep ends. A local cluster
started this way belongs to this process: its processes are its children and end with it,
and nothing else on the machine is touched (``ray stop`` would stop every Ray process of
the user, other clusters included).

The scenarios are shipped once: each is packed, every field of every class in it, into
plain data (strings, numbers, tuples; the compiled core's classes cannot be pickled) and put
into the object store, and every task gets a reference to it. The points are submitted
scenario by scenario (seed by seed, and for a trace swept over max_min_runtime cap by cap)
and a worker keeps the last two scenarios it unpacked, so it unpacks each about once."""

from __future__ import annotations

import dataclasses
import enum
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from apportion.core import After, BudgetTree, Hold, Host, HostState, WorkloadSpec
from apportion.core.fleet import FleetConfig

from .model import HostEvent, HostEventKind, LegacyPriority, Pools, Scenario, SimJob

if TYPE_CHECKING:
    from .sweep import Point, Runner, ScenarioKey

Packed = tuple[Any, ...]

# What a scenario is made of. A dataclass is packed as its name and every field in the
# order of its dataclass fields, so a field added to any of these travels without a change
# here; a value of a class not named here makes ``pack`` fail (tests pack a scenario with
# every field set), never drop it silently.
_CLASSES: dict[str, type] = {c.__name__: c for c in (
    Scenario, SimJob, WorkloadSpec, Host, HostEvent, Pools, FleetConfig, Hold)}
_ENUMS: dict[str, type[enum.Enum]] = {c.__name__: c for c in (
    HostState, HostEventKind, LegacyPriority, After)}
_FIELDS: dict[type, tuple[str, ...]] = {
    c: tuple(f.name for f in dataclasses.fields(c)) for c in _CLASSES.values()}
_PLAIN = (str, int, float, bool, type(None))


def _pack(value: Any) -> Any:
    """``value`` as plain data: a tagged tuple for anything but a str, number or None."""
    if isinstance(value, _PLAIN) and not isinstance(value, enum.Enum):
        return value
    kind = type(value)
    if kind in _FIELDS:
        return ("class", kind.__name__,
                tuple(_pack(getattr(value, name)) for name in _FIELDS[kind]))
    if isinstance(value, enum.Enum) and _ENUMS.get(kind.__name__) is kind:
        return ("enum", kind.__name__, value.value)
    if isinstance(value, BudgetTree):
        return ("tree", tuple((path, value.weight(path)) for path in value.nodes()))
    if isinstance(value, tuple | list):
        return ("tuple" if isinstance(value, tuple) else "list",
                tuple(_pack(v) for v in value))
    if isinstance(value, Mapping):
        return ("dict", tuple((_pack(k), _pack(v)) for k, v in value.items()))
    raise TypeError(f"pack: cannot ship a {kind.__name__} to Ray workers: {value!r:.80}")


def _unpack(data: Any) -> Any:
    if not isinstance(data, tuple):
        return data
    tag = data[0]
    if tag == "class":
        cls = _CLASSES[data[1]]
        return cls(**{name: _unpack(v)
                      for name, v in zip(_FIELDS[cls], data[2], strict=True)})
    if tag == "enum":
        return _ENUMS[data[1]](data[2])
    if tag == "tree":
        return BudgetTree.build(data[1])
    if tag == "tuple":
        return tuple(_unpack(v) for v in data[1])
    if tag == "list":
        return [_unpack(v) for v in data[1]]
    return {_unpack(k): _unpack(v) for k, v in data[1]}  # "dict"


def pack(scenario: Scenario) -> Packed:
    """``scenario`` as plain data, every field of it (``unpack`` rebuilds an equal one)."""
    packed: Packed = _pack(scenario)
    return packed


def unpack(data: Packed) -> Scenario:
    """The scenario ``pack`` packed."""
    scenario = _unpack(data)
    if not isinstance(scenario, Scenario):
        raise TypeError(f"unpack: not a packed scenario but a {type(scenario).__name__}")
    return scenario


_UNPACKED: dict[str, Scenario] = {}  # per worker process: object id -> scenario
_KEEP = 2  # scenarios a worker keeps (points are submitted scenario by scenario)


def _task(box: list[Any], settings: dict[str, Any], seed: int, runner: Runner) -> dict[str, Any]:
    """One point in a Ray worker. ``box`` holds the scenario's object reference (inside a
    list so that Ray hands over the reference, not the value, and the worker can unpack
    each scenario once)."""
    import ray

    ref = box[0]
    key = ref.hex()
    scenario = _UNPACKED.get(key)
    if scenario is None:
        while len(_UNPACKED) >= _KEEP:  # the oldest goes: a worker moves on scenario by scenario
            del _UNPACKED[next(iter(_UNPACKED))]
        scenario = _UNPACKED[key] = unpack(ray.get(ref))
    return runner(scenario, settings, seed)


def _cause(error: BaseException) -> BaseException:
    """The point's own exception out of Ray's wrapper (RayTaskError keeps it as ``cause``)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


PROBE_TIMEOUT_S = 10.0  # to connect
HANDSHAKE_TIMEOUT_S = 5.0  # for the first frame of the answer
# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113, 3.4): a gRPC
# server, as Ray's GCS is, answers with a SETTINGS frame of its own (its preface) at once
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_SETTINGS = 0x4


def _probe(address: str, source: str) -> None:
    """Refuse at once a ``HOST:PORT`` where no Ray cluster answers: Ray would retry
    connecting to its GCS there for minutes, printing a warning every few seconds. Nothing
    may listen there, or a server that is no gRPC server (a web server, apportion's own
    service): the GCS speaks gRPC, so whatever does not answer HTTP/2's connection preface
    with a SETTINGS frame within seconds is refused. With RAY_USE_TLS the GCS answers only
    after a TLS handshake, so only the connection is checked. Other forms (``auto``,
    ``ray://...``) are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    if not 0 < int(port) < 65536:  # the socket call's own message would blame the network
        raise RuntimeError(f"{source} {address}: {port} is not a port: a TCP port is 1 to "
                           "65535 (the head's GCS listens on 6379 by default)")

    def refuse(why: str) -> NoReturn:
        raise RuntimeError(f"{source} {address}: no Ray cluster answers there ({why}); give "
                           "the head's GCS address, HOST:PORT (port 6379 by default)")

    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S)
    except OSError as e:
        refuse("timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e)))
    with conn:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        answer = b""
        try:
            conn.settimeout(HANDSHAKE_TIMEOUT_S)
            conn.sendall(_H2_PREFACE)
            while len(answer) < 9 and (chunk := conn.recv(9 - len(answer))):
                answer += chunk
        except TimeoutError:
            refuse(f"it accepts connections but sent no gRPC answer within "
                   f"{HANDSHAKE_TIMEOUT_S:g} s")
        except OSError as e:
            if not answer:
                refuse(f"it accepts connections but {e.strerror or e} on a gRPC greeting")
    if len(answer) == 9 and answer[3] == _H2_SETTINGS and answer[5:] == bytes(4):
        return
    if answer.startswith(b"HTTP/"):
        refuse("an HTTP/1 server answered, not Ray's GCS, which speaks gRPC")
    if not answer:
        refuse("it accepts connections but closed one without a gRPC answer")
    refuse(f"it accepts connections but answered {answer!r}, not gRPC")


def run_ray(
    scenarios: Mapping[ScenarioKey, Scenario], points: Sequence[Point], runner: Runner,
    address: str | None, jobs: int,
    done: Callable[[int, dict[str, Any] | None, str | None], None],
) -> None:
    """Run every point as a Ray task; ``done(index, summary, error)`` as each finishes."""
    from .sweep import describe

    source = "--address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        _probe(address, source)
    temp_dir = None
    saved = dict(os.environ)
    if address is None:
        # a token of its own (Ray would otherwise share ~/.ray/auth_token with every other
        # local cluster of the user), handed to the cluster's processes by the environment;
        # set before Ray is imported, which reads it then
        os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                           "RAY_AUTH_TOKEN": secrets.token_hex(32)})
    try:
        import ray
    except ImportError:
        os.environ.clear()
        os.environ.update(saved)
        raise RuntimeError(
            "--engine ray needs Ray: pip install 'apportion[ray]' (or pip install ray)"
        ) from None
    if address is None:
        # a cluster of our own, on loopback; a short path: Ray's Unix sockets live under it
        temp_dir = tempfile.mkdtemp(prefix="apportion-ray-")
        ray.init(num_cpus=jobs, include_dashboard=False, _node_ip_address="127.0.0.1",
                 _temp_dir=temp_dir, log_to_driver=False, configure_logging=False)
    else:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise RuntimeError(f"{source} {address}: cannot connect to Ray: {e}") from None
        if ray.cluster_resources().get("CPU", 0.0) < 1:  # type: ignore[no-untyped-call]
            # a point's task needs a CPU: none would start, and the sweep would wait without
            # a word for ever (an autoscaler may yet add nodes with CPUs, so it waits)
            print(f"warning: {source} {address}: the Ray cluster has no CPU, and every point "
                  "needs one: none starts until a node with CPUs joins it (Ctrl-C stops the "
                  "sweep)", file=sys.stderr, flush=True)
    try:
        refs = {key: ray.put(pack(sc)) for key, sc in scenarios.items()}
        task = ray.remote(num_cpus=1)(_task)
        # scenario by scenario, so that a worker mostly runs points of the scenario it unpacked
        order = sorted(points, key=lambda p: (list(refs).index(p.scenario), p.index))
        pending = {task.remote([refs[p.scenario]], p.settings, p.seed, runner): p.index
                   for p in order}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    summary = ray.get(ref)
                except Exception as e:  # a failed point is reported; the others go on
                    done(index, None, describe(_cause(e)))
                else:
                    done(index, summary, None)
    finally:
        ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
            os.environ.clear()
            os.environ.update(saved)
