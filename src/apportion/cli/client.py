"""Client commands: talk to a running ``apportion serve`` over HTTP.

Server and token come from ``--url``/``--token``, else ``APPORTION_URL``/``APPORTION_TOKEN``,
else the client config file (``~/.config/apportion/client.toml``, or the path in
``APPORTION_CLIENT_CONFIG``, which must then exist) with keys ``url`` and ``token`` (or
``token_file``). Read commands, and the write commands a script runs, take ``--json`` for
machine-readable output (``write``: the server's answer as is); errors print the
server's message on stderr and exit with the status of its kind (``EXIT_CODES``).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import click
import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from apportion.core import format_duration
from apportion.core.tree import MAX_WEIGHT, MIN_WEIGHT
from apportion.core.units import format_duration_exact, format_figure
from apportion.service.replies import (
    AuditEntry,
    Budget,
    BudgetCreated,
    BudgetManagers,
    BudgetMembers,
    BudgetUsage,
    BudgetWeight,
    Host,
    HostInUse,
    NewToken,
    Token,
    User,
    Why,
    Workload,
)
from apportion.service.validation import MAX_PATH
from apportion.text import at_key_line, escape_controls
from apportion.times import format_time, local_offset, local_zone, time_zone

from .ids import WORKLOAD_ID, workload_id
from .numbers import ReadableRange

DEFAULT_URL = "http://127.0.0.1:8642"
F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R", bound=BaseModel)
# a retried call waits 0.5, 1, 2, 4, 5, 5, ... s: about a minute in all, then gives up
RETRY_WAITS = (0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0)
# how long --wait and logs -f keep asking a server that does not answer (refused, lost, timed
# out, 5xx): the work is known to exist and goes on meanwhile (a server restart, an upgrade)
OUTAGE_S = 600.0
AUDIT_PAGE = 10_000  # GET /v1/audit's largest limit
_ERRNO = re.compile(r"^\[Errno \d+\] ")  # "[Errno 111] Connection refused": the words only


# a budget's weight: out of the tree's range is refused here, naming the flag as typed
WEIGHT = ReadableRange("a weight", min=MIN_WEIGHT, max=MAX_WEIGHT)


class Name(click.ParamType[str]):
    """A name that goes into the API's URL path (a host, a user, a token id; with
    ``path``, a budget path, its names separated by ``/``), sent as one path segment each:
    percent-quoted, so that ``#``, ``?``, ``%`` or a control character in it names nothing
    else (``users set 'x/../bob'`` changed bob). An empty name, a ``/`` in a name, or a
    name ``.`` or ``..`` (which a URL resolves away) is a usage error naming the argument,
    not a request for a path that names nothing or something else."""

    name = "NAME"

    def __init__(self, path: bool = False) -> None:
        self.path = path

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        text = str(value)
        if not text:
            self.fail("empty", param, ctx)
        # a budget path's limit, and over any host's, user's or token id's: the server's own
        # cap on a URL's part is longer, and names no argument (path.name: ...)
        if len(text) > MAX_PATH:
            what = "a budget path" if self.path else "a name"
            self.fail(f"{escape_controls(text[:40])!r}... ({len(text)} characters) is not "
                      f"{what}: at most {MAX_PATH} characters", param, ctx)
        for part in text.split("/") if self.path else [text]:
            if part in ("", ".", "..") or "/" in part:
                what = "a budget path: names separated by '/'" if self.path else "a name"
                self.fail(f"{escape_controls(text)!r} is not {what}", param, ctx)
        return text


NAME = Name()
BUDGET_PATH = Name(path=True)

# a word that reads as a negative number (-1, -0.5, -1e3, -inf): an argument, not an option
_NEGATIVE_NUMBER = re.compile(r"-(\d|\.\d|inf|nan)", re.IGNORECASE)


class NumbersAsArguments(click.Command):
    """A command whose arguments may be negative numbers (``budgets set ai -1``): click
    reads any word starting with ``-`` as an option, so ``-1`` was refused as ``No such
    option '-1'`` instead of as the value it is. Such a word is read as an argument, in its
    place among the others, unless it is the value of the option before it (``--weight
    -1``): the options are read first, then the arguments after a ``--``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {name for p in self.get_params(ctx) if isinstance(p, click.Option)
                       and not p.is_flag and not p.count for name in p.opts}
        options: list[str] = []
        arguments: list[str] = []
        words = iter(args)
        for arg in words:
            if arg == "--":  # the rest are arguments already
                arguments.extend(words)
            elif arg.startswith("-") and len(arg) > 1 and not _NEGATIVE_NUMBER.match(arg):
                options.append(arg)
                if arg in takes_value:  # the option's value, whatever it looks like
                    value = next(words, None)
                    if value is None:  # as click says it
                        raise click.BadOptionUsage(arg, f"Option '{arg}' requires an "
                                                   "argument.", ctx)
                    options.append(value)
            else:
                arguments.append(arg)
        if not any(_NEGATIVE_NUMBER.match(a) for a in arguments):
            return super().parse_args(ctx, args)
        return super().parse_args(ctx, [*options, "--", *arguments])


def url_part(name: str) -> str:
    """``name`` (a :class:`Name`) as the segments of a URL path: each percent-quoted."""
    return "/".join(quote(part, safe="") for part in name.split("/"))


# ---- exit codes ------------------------------------------------------------------------------
# One table for every client command (docs/cli.md, "Exit codes"): a script can tell "already
# exists" from "server down" without reading the words. 40-50 echo the HTTP status (4xx, 5xx):
# codes a job rarely exits with, since `submit --wait` passes a job's own code through.
EXIT_FAILED = 1  # none of the below; `submit --wait`: the work ended without a code of its own
EXIT_USAGE = 2  # usage or bad input: click's own, the CLI's checks, the server's 400/413/422
EXIT_OTHER_4XX = 40  # another refusal of the server (429: try again later, ...)
EXIT_REFUSED = 43  # 401 (no valid token) or 403 (not allowed)
EXIT_NOT_FOUND = 44  # 404
EXIT_CONFLICT = 49  # 409: the item's state does not allow it (already exists, ...)
EXIT_UNREACHABLE = 50  # no answer (refused, lost, timed out) or a 5xx, after any retries
EXIT_CODES = {400: EXIT_USAGE, 401: EXIT_REFUSED, 403: EXIT_REFUSED, 404: EXIT_NOT_FOUND,
              409: EXIT_CONFLICT, 413: EXIT_USAGE, 422: EXIT_USAGE}


def exit_code_for(status: int) -> int:
    """The exit code of a command the server answered with HTTP ``status`` (an error)."""
    if status >= 500:
        return EXIT_UNREACHABLE
    return EXIT_CODES.get(status, EXIT_OTHER_4XX)


class BadInput(click.ClickException):
    """Input the CLI refuses itself that is not a flag's syntax (a client config file, a
    period ``--from`` after ``--to``): ``Error: <what>`` without click's usage lines, and
    the usage code, as the server's 422 for the same input."""

    exit_code = EXIT_USAGE


class Failure(click.ClickException):
    """An error of a client command (``Error: <message>``) that exits with ``exit_code``
    (one of ``EXIT_*``)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        # click declares exit_code a class variable, yet reads it from the instance
        self.exit_code = exit_code  # type: ignore[misc]


class ServerRefused(Failure):
    """An error answer of the server (``status``), or none (``status`` None: it could not
    be reached, or did not answer in time): its exit code says which (``exit_code_for``)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message,
                         EXIT_UNREACHABLE if status is None else exit_code_for(status))
        self.status = status


def reworded(e: click.ClickException, message: str) -> click.ClickException:
    """``e`` said in other words (a field named as typed), with its exit code kept."""
    return Failure(message, e.exit_code)


# ---- connection ------------------------------------------------------------------------------
CONFIG_KEYS = ("token", "token_file", "url")
_TOKEN = re.compile(r"[!-~]+")  # printable ASCII, no spaces: what a bearer header can carry


def _config_file() -> dict[str, tuple[str, str]]:
    """The client config file's ``url`` and ``token`` (read from ``token_file`` if given
    instead), each with how to name it in an error (``client.toml: url``). The default file
    may be missing; a file named by ``APPORTION_CLIENT_CONFIG`` must be there. Every problem
    is reported as ``file:line: key: problem`` (the line of the key), as the server's
    config reports them."""
    named = os.environ.get("APPORTION_CLIENT_CONFIG")
    path = Path(named) if named else Path.home() / ".config" / "apportion" / "client.toml"
    if not named and not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except OSError as e:
        by = " (named by APPORTION_CLIENT_CONFIG)" if named else ""
        raise BadInput(f"{path}: cannot read: {e.strerror or e}{by}") from None
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path}: {e}") from None
    try:
        return _config_values(path, data, text)
    except BadInput as e:  # "token, token_file": the line of the later one
        located = at_key_line(e.message, str(path), text,
                                  lambda m: m.split(": ", 1)[0].split(", ")[::-1])
        if located == e.message:
            raise
        raise BadInput(located) from None


def _config_values(path: Path, data: dict[str, Any], text: str
                   ) -> dict[str, tuple[str, str]]:
    """The client config file's values (``data``, read from ``path``, whose ``text`` it
    is), checked, each with how to name it in an error: ``client.toml:2: url``."""

    def named(key: str) -> str:
        return at_key_line(f"{path}: {key}", str(path), text)

    for key, value in data.items():
        if key not in CONFIG_KEYS:
            raise BadInput(
                f"{path}: {key}: unknown key (valid keys: {', '.join(CONFIG_KEYS)})")
        if not isinstance(value, str):
            raise BadInput(f"{path}: {key}: must be a string, got {value!r}")
    if "token" in data and "token_file" in data:
        raise BadInput(f"{path}: token, token_file: give one of them")
    out: dict[str, tuple[str, str]] = {
        key: (data[key], named(key)) for key in ("url", "token") if key in data}
    if "token_file" in data:
        token_path = Path(data["token_file"]).expanduser()
        try:
            token = token_path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise BadInput(
                f"{path}: token_file: cannot read {token_path}: {e.strerror or e}") from None
        out["token"] = (token, f"{named('token_file')}: {token_path}")
    return out


def url_problem(url: str) -> str | None:
    """What keeps ``url`` from being the server's address, or None: it needs ``http://`` or
    ``https://`` and a host (without a scheme every request failed, after a minute of
    retries for a submission)."""
    if not url.strip():
        return "the URL is empty"
    scheme, sep, _ = url.partition("://")
    if not sep:
        return f"{url!r} has no scheme: give http:// or https:// (http://{url})"
    if scheme.lower() not in ("http", "https"):
        return f"{url!r}: the scheme must be http:// or https://"
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL as e:
        return f"{url!r}: {e}"
    return None if host else f"{url!r} has no host"


def token_problem(token: str) -> str | None:
    """What keeps ``token`` from being sent as a bearer token, or None: a blank one, or one
    with a space or a newline, was refused by the HTTP library as "Illegal header value",
    which read as a server that could not be reached."""
    if not token.strip():
        return "the token is empty"
    if not _TOKEN.fullmatch(token):
        return ("the token must be one word of printable characters (no spaces, newlines or "
                "control characters)")
    return None


OLDER_SERVER = "an older server? upgrade and restart it"
SHOWN_PROBLEMS = 5  # of a reply's wrong or missing fields, the first ones named


class UnexpectedReply(click.ClickException):
    """A reply this client cannot read (a field missing or of another kind, a request the
    server does not have): most likely a server of an older release, not restarted since
    the upgrade. ``what`` is the request, ``problem`` what was wrong with its answer,
    ``server`` what the server says it is (see :meth:`Client.versions`)."""

    def __init__(self, what: str, problem: str, server: str = "") -> None:
        self.what, self.problem = what, problem
        hint = f"{OLDER_SERVER}: {server}" if server else OLDER_SERVER
        super().__init__(f"{what}: unexpected reply from the server: {problem} ({hint})")


def validation_problem(e: ValidationError) -> str:
    """Pydantic's errors as one short line, each field with its path in the reply
    (``pending.0.hold: Field required``), without pydantic's input dump and links."""
    problems = [f"{'.'.join(str(part) for part in err['loc']) or 'the reply'}: {err['msg']}"
                for err in e.errors(include_url=False)]
    more = len(problems) - SHOWN_PROBLEMS
    return "; ".join(problems[:SHOWN_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")


class Client:
    """A thin HTTP client; every error becomes a ClickException with the server's message."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def call(self, method: str, path: str, body: Any = None,
             params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
             retry: bool = False, timeout: float | None | httpx.Timeout = 60,
             accept: tuple[int, ...] = (), patient: bool = False) -> httpx.Response:
        """One request. ``retry`` (only for requests that are safe to repeat, e.g. a
        submission with an Idempotency-Key): a lost connection, a refused one or a 5xx is
        retried with backoff (``RETRY_WAITS``). ``patient`` (a read of what is known to
        exist, by --wait and logs -f): the same, for up to ``OUTAGE_S`` of outage. ``timeout``
        None: wait as long as the server takes to answer. An error status in ``accept`` is
        returned for the caller to read."""
        if patient:
            return self._patiently(lambda: self.call(method, path, body, params, headers,
                                                     timeout=timeout, accept=accept))
        waits = list(RETRY_WAITS) if retry else []
        retries = len(waits)
        limit = httpx.Timeout(timeout, connect=60) if timeout is None else timeout

        def wait(why: str) -> None:
            # said once, at the first retry: a minute of silence looked like a hang
            if len(waits) == retries:
                click.echo(f"apportion: the server at {self.url} {why}; retrying for about "
                           "a minute ...", err=True)
            time.sleep(waits.pop(0))

        while True:
            try:
                r = self.http.request(
                    method, f"/v1{path}", json=body, headers=headers,
                    params={k: v for k, v in (params or {}).items() if v is not None},
                    timeout=limit,
                )
            except httpx.TransportError as e:
                if waits:
                    wait(f"does not answer ({_ERRNO.sub('', str(e))})")
                    continue
                if isinstance(e, httpx.ReadTimeout):  # it was reached and got the request
                    raise ServerRefused(
                        f"the server at {self.url} did not answer within "
                        f"{httpx.Timeout(limit).read:g} s (it may still be working on the "
                        "request)", None) from None
                raise ServerRefused(
                    f"cannot reach the server at {self.url}: {e}", None) from None
            except httpx.HTTPError as e:
                raise ServerRefused(
                    f"cannot reach the server at {self.url}: {e}", None) from None
            if r.status_code >= 500 and waits:
                wait(f"answered HTTP {r.status_code}")
                continue
            break
        if r.status_code == 405:  # a route this client knows and the server does not
            raise UnexpectedReply(f"{method} /v1{path}",
                                  "the server has no such request (HTTP 405)")
        if r.status_code >= 400 and r.status_code not in accept:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            # the server's words quote what was sent (a name, a value): shown escaped
            raise ServerRefused(f"{escape_controls(str(detail))} (HTTP {r.status_code})",
                                r.status_code)
        return r

    def _patiently(self, request: Callable[[], httpx.Response]) -> httpx.Response:
        """``request()``, asked again while the server cannot be reached or answers 5xx,
        until it has not answered for ``OUTAGE_S``; said on stderr once an outage."""
        down_since: float | None = None
        wait = RETRY_WAITS[0]
        while True:
            try:
                return request()
            except ServerRefused as e:
                if e.exit_code != EXIT_UNREACHABLE:
                    raise
                now = time.monotonic()
                if down_since is None:
                    down_since = now
                    click.echo(f"apportion: server unreachable, retrying for up to "
                               f"{format_duration(OUTAGE_S)} ({e.message})", err=True)
                elif now - down_since >= OUTAGE_S:
                    raise
                time.sleep(wait)
                wait = min(2 * wait, RETRY_WAITS[-1])

    def pages(self, path: str, params: dict[str, Any], cursor: str, page: int,
              most: int | None = None) -> tuple[list[Any], bool]:
        """The rows of a list the server answers in pages of at most ``page`` (docs/api.md,
        "Pages"): ``GET /v1<path>`` again with ``cursor`` as each answer's ``Link: <...>;
        rel="next"`` sets it, until an answer has none, or ``most`` rows are read. Returns
        the rows, and whether the server has more."""
        rows: list[Any] = []
        while True:
            limit = page if most is None else min(page, most - len(rows))
            r = self.call("GET", path, params={**params, "limit": limit})
            rows += r.json()
            link = r.links.get("next")
            if link is None or (most is not None and len(rows) >= most):
                return rows, link is not None
            after = httpx.URL(link["url"]).params.get(cursor)
            if after is None:
                raise UnexpectedReply(f"GET /v1{path}",
                                      f"its Link header has no {cursor}: {link['url']}")
            params = {**params, cursor: after}

    def json(self, method: str, path: str, body: Any = None,
             params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
             retry: bool = False, patient: bool = False) -> Any:
        return self.call(method, path, body, params, headers, retry, patient=patient).json()

    def reply(self, model: type[R], method: str, path: str, body: Any = None) -> R:
        """One request whose answer is one ``model`` (service/replies.py)."""
        return parse(model, self.json(method, path, body), f"{method} /v1{path}")

    def versions(self) -> str:
        """The server's release and store schema (``GET /v1/health``) beside this client's,
        to say with a reply this client cannot read; "" if the server cannot be asked."""
        from apportion import __version__
        from apportion.service.store.store import newest_revision

        mine = f"this client is apportion {__version__} with store schema {newest_revision()}"
        try:
            r = self.http.get("/v1/health", timeout=10)
            health = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return ""
        if not isinstance(health, dict):
            return ""
        if "version" not in health:
            return f"it does not say its version, {mine}"
        return (f"it is apportion {health['version']} with store schema "
                f"{health.get('schema_revision')}, {mine}")


def as_typed(e: click.ClickException, names: Mapping[str, str]) -> click.ClickException:
    """The server's refusal ``"<field>: why"`` with the field named as the user typed it
    (``names``: API field -> a flag, or a script line); other errors as they are. A query
    parameter is named by its name alone; a server older than that named it
    ``query.<field>`` in some refusals (service/api.py's checks), read the same way."""
    for field_name, typed in names.items():
        for sent in (field_name, f"query.{field_name}"):
            if e.message.startswith(sent + ":"):
                return reworded(e, typed + e.message[len(sent):])
    return e


def parse(model: type[R], data: Any, what: str) -> R:
    """``data`` (a decoded reply) as ``model``; a reply of another shape is an error that
    says which request it answered (a server of another version, say)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise UnexpectedReply(what, validation_problem(e)) from None


def parse_list(model: type[R], data: Any, what: str) -> list[R]:
    """``data`` (a decoded reply) as a list of ``model``."""
    try:
        return TypeAdapter(list[model]).validate_python(data)  # type: ignore[valid-type]
    except ValidationError as e:
        raise UnexpectedReply(what, validation_problem(e)) from None


def make_client(url: str | None, token: str | None) -> Client:
    """A client for ``--url``/``--token`` as given (flag or environment), else the client
    config file's, else the default URL. A bad one is refused naming where it was given: a
    usage error for the flag or the variable, ``file: key: problem`` for the file. A
    trailing ``/v1`` on the URL (the API's prefix, as docs/api.md writes routes) is
    dropped."""
    given: dict[str, tuple[str | None, str]] = {
        "url": (url, _given_as("url", "--url", "APPORTION_URL")),
        "token": (token, _given_as("token", "--token", "APPORTION_TOKEN"))}
    if url is None or token is None:
        for key, setting in _config_file().items():
            if given[key][0] is None:
                given[key] = setting
    for key, variable in (("url", "APPORTION_URL"), ("token", "APPORTION_TOKEN")):
        if given[key][0] is None and os.environ.get(variable) == "":
            # click takes an empty variable for none: without this, $(cat a-missing-file)
            # sent no token and read as the server's "missing bearer token (HTTP 401)",
            # and an empty URL asked the default one
            given[key] = ("", variable)
    for key, check in (("url", url_problem), ("token", token_problem)):
        value, where = given[key]
        problem = None if value is None else check(value)
        if problem is not None:
            usage = where in ("--url", "APPORTION_URL", "--token", "APPORTION_TOKEN")
            raise (click.UsageError if usage else BadInput)(f"{where}: {problem}")
    url, token = given["url"][0], given["token"][0]
    base = DEFAULT_URL if url is None else url.rstrip("/").removesuffix("/v1")
    return Client(base, token)


def _given_as(param: str, flag: str, envvar: str) -> str:
    """How the user gave the value of ``param``: the flag, or the environment variable."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(param) if ctx is not None else None
    return envvar if source is click.core.ParameterSource.ENVIRONMENT else flag


def connection(f: F) -> F:
    """Add --url and --token to a command and pass a ready ``client`` instead."""
    import functools

    @click.option("--url", envvar="APPORTION_URL", help="server URL (env APPORTION_URL)")
    @click.option("--token", envvar="APPORTION_TOKEN", help="bearer token (env APPORTION_TOKEN)")
    @functools.wraps(f)
    def wrapper(*args: Any, url: str | None, token: str | None, **kwargs: Any) -> Any:
        client = make_client(url, token)
        try:
            return f(*args, client=client, **kwargs)
        except UnexpectedReply as e:  # asked only now: each command costs one request
            raise UnexpectedReply(e.what, e.problem, client.versions()) from None

    return wrapper  # type: ignore[return-value]


json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")
# a write command's: what the server answered, instead of the sentence saying it
answer_json_option = click.option("--json", "as_json", is_flag=True,
                                  help="print the server's answer as one JSON document")


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def write(client: Client, model: type[R], method: str, path: str, body: Any, as_json: bool,
          text: Callable[[R], str], typed: Mapping[str, str] | None = None) -> R:
    """A write command's request, whose answer is one ``model``, and its stdout: with
    ``--json`` (``as_json``) the answer as the server gave it, one JSON document; else
    ``text(answer)``. Returns the answer (read either way: a reply of another shape is an
    error, not printed), for what the command says on stderr. ``typed``: the body's fields
    as the user typed them (``{"reason": "--reason"}``), to name in the server's refusals."""
    try:
        data = client.json(method, path, body)
    except click.ClickException as e:
        raise as_typed(e, typed or {}) from None
    answer = parse(model, data, f"{method} /v1{path}")
    if as_json:
        _print_json(data)
    else:
        click.echo(text(answer))
    return answer


# ---- formatting ------------------------------------------------------------------------------
def fmt_time(t: float | None) -> str:
    """A time in this machine's zone, with its offset from UTC (the rule of every time
    shown: apportion.times); ``-`` for none."""
    return "-" if t is None else format_time(t, time_zone(local_zone()))


def exit_to_show(reason: str, exit_code: int | None) -> int | None:
    """The exit code to print next to how a workload ended: None where there is none (a
    lost or preempted workload may have none) or the reason gives it already
    (``exited 0``)."""
    return None if exit_code is None or reason.startswith("exited ") else exit_code


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print an aligned text table (control characters in its cells escaped)."""
    cells = [[escape_controls(str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    click.echo(line.format(*headers).rstrip())
    for r in cells:
        click.echo(line.format(*r).rstrip())


# ---- workloads (submit, queue, cancel, logs: apportion.cli.jobs) ----------------------------
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def exported_env(spec: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment ``--export`` asks for, as Slurm's sbatch reads it: ``ALL`` (the
    submitter's), ``NONE``, or names (``NAME`` takes the submitter's value, ``NAME=value``
    sets one), with ``ALL`` or ``NONE`` first to start from. apportion's own variables are
    never exported (the token stays out of the job); from ALL, variables that cannot be
    exported (a name like ``BASH_FUNC_f%%``, a value that is not UTF-8) are left out."""
    items = [x for x in spec.split(",") if x != ""]
    if not items:
        raise click.BadParameter("empty (use ALL, NONE or NAME[=value],...)",
                                 param_hint="--export")
    env: dict[str, str] = {}
    for i, item in enumerate(items):
        if item in ("ALL", "NONE"):
            if i != 0:
                raise click.BadParameter(f"{item}: must come first", param_hint="--export")
            if item == "ALL":
                env = {k: v for k, v in environ.items() if _exportable(k, v)}
            continue
        name, eq, value = item.partition("=")
        if not _ENV_NAME.match(name):
            raise click.BadParameter(f"{name!r}: not a variable name", param_hint="--export")
        if not eq:
            if name not in environ:
                raise click.BadParameter(f"{name}: not set in your environment",
                                         param_hint="--export")
            value = environ[name]
            if not _exportable(name, value):
                raise click.BadParameter(f"{name}: its value is not UTF-8 text",
                                         param_hint="--export")
        env[name] = value
    return {k: v for k, v in env.items() if not k.startswith("APPORTION_")}


def _exportable(name: str, value: str) -> bool:
    if not _ENV_NAME.match(name) or "\0" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@click.command()
@click.argument("workload_id", type=WORKLOAD_ID)
@json_option
@connection
def show(client: Client, workload_id: str, as_json: bool) -> None:
    """Show one workload and its attempts; the GPU kinds and cluster it asked for, if any,
    and with several pools the one it runs in."""
    data = client.json("GET", f"/workloads/{workload_id}")
    if as_json:
        _print_json(data)
        return
    w = parse(Workload, data, f"GET /v1/workloads/{workload_id}")

    def say(key: str, value: object) -> None:
        click.echo(f"{key + ':':<21}{escape_controls(str(value))}")

    for key in ("id", "status", "budget", "user", "gpus"):
        say(key, getattr(w, key))
    # what was stored, exactly: two units would drop the rest ("1 d 2 h" for 1-2:30)
    say("min_runtime", format_duration_exact(w.min_runtime))
    say("resumable", w.resumable)
    say("priority", w.priority)
    # 0: none declared (the policy assumes [policy] default_checkpoint_interval)
    interval = (format_duration_exact(w.checkpoint_interval) if w.checkpoint_interval
                else "none")
    say("checkpoint_interval", interval)
    say("checkpoint_on_term", w.checkpoint_on_term)
    if w.name:
        say("name", w.name)
    if w.array_id:
        say("array", f"{w.array_id} index {w.array_index}")
    if w.time_limit:
        say("time limit", format_duration_exact(w.time_limit))
    if w.signal:  # "B:USR1@120": SIGUSR1 to the batch script 120 s before the limit
        sig, _, before = w.signal.partition("@")
        batch = sig.startswith("B:")
        # to the latest attempt: the open one, else (it ended) the last one
        latest = w.attempt or (w.attempts[-1] if w.attempts else None)
        sent = latest.signal_sent_at if latest is not None else None
        name = sig.removeprefix("B:")
        say("signal", f"{f'signal {name}' if name.isdigit() else f'SIG{name}'} {before} s "
                      "before the time limit"
                      f"{' (to the batch script)' if batch else ''}"
                      f"{'' if w.time_limit else ' (it has none: never sent)'}"
                      f"{f'; sent {fmt_time(sent)}' if sent is not None else ''}")
    if w.dependencies:
        say("dependency", ",".join(f"{k}:{d}" for k, d in w.dependencies))
    if w.nodelist or w.exclude:
        say("hosts", f"only {','.join(w.nodelist) or 'any'}; not "
                     f"{','.join(w.exclude) or '-'}")
    if w.gpu_kinds:  # preferred first, as given
        say("gpu kinds", ",".join(w.gpu_kinds))
    if w.cluster:
        say("cluster", w.cluster)
    if w.pool:  # set while it runs, with several pools
        say("pool", w.pool)
    # quoted as a shell would need it: copied into a terminal, it runs the same command
    # (unless it holds control characters, which say() shows escaped)
    command = "(private)" if w.private or w.command is None else shlex.join(w.command)
    say("command", command)
    say("submitted", fmt_time(w.submit_time))
    if w.cancel_requested:
        say("cancel requested", "yes")
    if w.end_reason:
        code = exit_to_show(w.end_reason, w.exit_code)
        say("ended", w.end_reason + ("" if code is None else f" (exit {code})"))
    if w.attempts:
        click.echo("attempts:")
        table(
            ["N", "STARTED", "ENDED", "PLACEMENT", "GPU_HOURS", "EXIT", "REASON"],
            [[a.n, fmt_time(a.started_at), fmt_time(a.ended_at),
              ",".join(f"{h}:{g}" for h, g, _ in a.placement),
              "-" if a.gpu_seconds is None else f"{a.gpu_seconds / 3600:.2f}",
              "-" if a.exit_code is None else a.exit_code, a.end_reason or "-"]
             for a in w.attempts],
        )


@click.command()
@click.argument("workload_id", type=WORKLOAD_ID)
@json_option
@connection
def why(client: Client, workload_id: str, as_json: bool) -> None:
    """Explain why a workload waits, until when it is protected, what change to the request
    would start it sooner, or (once it ended) what happened to it. --json: the structure.
    Times are in this machine's zone, with its offset from UTC, as show writes them."""
    # the server writes the sentences' times in the zone asked for: the one show uses, or
    # where the server's zone database lacks its name (422 on tz), its offset now
    path = f"/workloads/{workload_id}/why"
    r = client.call("GET", path, params={"tz": local_zone()}, accept=(422,))
    if r.status_code == 422:
        r = client.call("GET", path, params={"tz": local_offset()})
    data = r.json()
    if as_json:
        _print_json(data)
        return
    try:
        reply = TypeAdapter(Why).validate_python(data)
    except ValidationError as e:
        raise UnexpectedReply(f"GET /v1/workloads/{workload_id}/why",
                              validation_problem(e)) from None
    for line in reply.text:  # they quote the workload's end reason, which may quote its command
        click.echo(escape_controls(line))


class HintedGroup(click.Group):
    """A group that answers a command it lacks but an admin would type (``users remove``)
    with what to do instead, rather than click's bare ``No such command``."""

    hints: Mapping[str, str] = {}

    def resolve_command(self, ctx: click.Context, args: list[str],
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name in self.hints and name not in self.commands:
            ctx.fail(f"No such command {name!r}: {self.hints[name]}")
        return super().resolve_command(ctx, args)


_LEAVING = ("users are never removed: their name stays on their past work, in the audit and "
            "in the usage reports. To take a user's access away, revoke their tokens "
            "(apportion tokens list --user NAME, then apportion tokens revoke ID) and take "
            "them out of the budgets that name them (apportion budgets members PATH ...), "
            "and cancel the work they left if it should not run (apportion cancel --user "
            "NAME); "
            "docs/operations.md, \"People joining, moving and leaving\"")


class UsersGroup(HintedGroup):
    hints = dict.fromkeys(("remove", "rm", "delete", "del", "disable", "deactivate", "lock"),
                          _LEAVING)


class TokensGroup(HintedGroup):
    hints = dict.fromkeys(("remove", "rm", "delete", "del", "disable"),
                          "a token is revoked, not deleted: apportion tokens revoke ID (the "
                          "ids are in apportion tokens list)")


_CLOSING = ("budgets are never removed: their history (past work, the audit, the usage "
            "reports) stays theirs. To close one, take everyone out of it (apportion budgets "
            "members PATH and apportion budgets managers PATH, with no names; a member of a "
            "node above it may still submit to it), give its share to its siblings "
            "(apportion budgets set PATH 0.000001, the least weight) and cancel the work "
            "left in it if it should not run (apportion cancel --budget PATH); "
            "docs/cli.md, \"budgets\"")


class BudgetsGroup(HintedGroup):
    hints = dict.fromkeys(("remove", "rm", "delete", "del", "close", "disable"), _CLOSING)


class HostsGroup(HintedGroup):
    # Slurm's words for a node's state (scontrol update state=resume|drain|down), typed by habit
    hints = {
        **dict.fromkeys(("resume", "undrain", "enable", "up"),
                        "apportion hosts repair NAME makes a host healthy again (and calls "
                        "off a drain)"),
        **dict.fromkeys(("down", "disable", "offline"),
                        "apportion hosts drain NAME takes a host out of service (it empties "
                        "as protections end, then goes to repair)"),
    }


# ---- budgets ---------------------------------------------------------------------------------
@click.group(cls=BudgetsGroup)
def budgets() -> None:
    """The budget tree: show, change weights and people, usage."""


@budgets.command("tree")
@json_option
@connection
def budgets_tree(client: Client, as_json: bool) -> None:
    """Show the tree with weights, shares, managers and members."""
    data = client.json("GET", "/budgets")
    if as_json:
        _print_json(data)
        return
    table(
        ["BUDGET", "WEIGHT", "SHARE", "MANAGERS", "MEMBERS"],
        [["  " * r.path.count("/") + r.path.rsplit("/", 1)[-1], f"{r.weight:g}",
          f"{format_figure(100 * r.share)}%", ",".join(r.managers) or "-",
          ",".join(r.members) or "-"] for r in parse_list(Budget, data, "GET /v1/budgets")],
    )


# `budgets list` is `budgets tree`, as hosts, users and tokens have `list`; hidden, so the
# help lists the command once
_budgets_list = copy.copy(budgets_tree)
_budgets_list.hidden = True
budgets.add_command(_budgets_list, "list")


@budgets.command("set", cls=NumbersAsArguments)
@click.argument("path", type=BUDGET_PATH)
@click.argument("weight", type=WEIGHT, required=False)
@click.option("--weight", "weight_flag", type=WEIGHT, metavar="W",
              help="the weight, as `budgets create` takes it (the same as WEIGHT)")
@answer_json_option
@connection
def budgets_set(client: Client, path: str, weight: float | None,
                weight_flag: float | None, as_json: bool) -> None:
    """Set a node's weight: apportion budgets set PATH WEIGHT (or --weight W)."""
    if weight is not None and weight_flag is not None and weight != weight_flag:
        raise click.UsageError(f"the weight is given twice: {weight:g} and --weight "
                               f"{weight_flag:g}")
    weight = weight if weight is not None else weight_flag
    if weight is None:
        raise click.UsageError("missing the weight: apportion budgets set PATH WEIGHT")
    write(client, BudgetWeight, "PATCH", f"/budgets/{url_part(path)}", {"weight": weight},
          as_json, lambda b: f"{b.path}: weight {b.weight:g}")


@budgets.command("members")
@click.argument("path", type=BUDGET_PATH)
@click.argument("names", nargs=-1)
@answer_json_option
@connection
def budgets_members(client: Client, path: str, names: tuple[str, ...], as_json: bool) -> None:
    """Replace a node's members (none: remove all; alice bob, or alice,bob)."""
    names = people(names)
    write(client, BudgetMembers, "PUT", f"/budgets/{url_part(path)}/members",
          {"members": list(names)}, as_json,
          lambda b: f"{b.path}: members {', '.join(b.members) or '(none)'}",
          typed=people_as_typed("members", names, "NAMES"))


def people(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names given, each argument or flag value also read as a comma-separated list
    (``alice,bob``, as sacctmgr takes users): a comma is in no user's name, so the list
    typed was refused as one name ``'alice,bob'``."""
    return tuple(part for name in names for part in name.split(","))


def people_as_typed(field_name: str, names: tuple[str, ...], typed: str) -> dict[str, str]:
    """The body's list of people ``field_name`` (and each of its items, ``members.1``, as
    the server names them) as typed: an argument or a flag (``NAMES``, ``--member``)."""
    return {field_name: typed, **{f"{field_name}.{i}": typed for i in range(len(names))}}


@budgets.command("managers")
@click.argument("path", type=BUDGET_PATH)
@click.argument("names", nargs=-1)
@answer_json_option
@connection
def budgets_managers(client: Client, path: str, names: tuple[str, ...],
                     as_json: bool) -> None:
    """Replace a node's managers (none: remove all; alice bob, or alice,bob)."""
    names = people(names)
    write(client, BudgetManagers, "PUT", f"/budgets/{url_part(path)}/managers",
          {"managers": list(names)}, as_json,
          lambda b: f"{b.path}: managers {', '.join(b.managers) or '(none)'}",
          typed=people_as_typed("managers", names, "NAMES"))


@budgets.command("create")
@click.argument("path")
@click.option("--weight", type=WEIGHT, default=1.0, show_default=True)
@click.option("--manager", "managers", multiple=True, help="repeatable, or alice,bob")
@click.option("--member", "members", multiple=True, help="repeatable, or alice,bob")
@answer_json_option
@connection
def budgets_create(client: Client, path: str, weight: float, managers: tuple[str, ...],
                   members: tuple[str, ...], as_json: bool) -> None:
    """Create a budget node below an existing one."""
    managers, members = people(managers), people(members)
    write(client, BudgetCreated, "POST", "/budgets", {
        "path": path, "weight": weight, "managers": list(managers), "members": list(members)},
        as_json, lambda b: f"created {b.path} (weight {b.weight:g})",
        typed={"path": "PATH", "weight": "--weight",
               **people_as_typed("managers", managers, "--manager"),
               **people_as_typed("members", members, "--member")})


@budgets.command("usage")
@json_option
@connection
def budgets_usage(client: Client, as_json: bool) -> None:
    """Charged and free GPU-hours over the lookback window, and usage ratios."""
    data = client.json("GET", "/budgets/usage")
    if as_json:
        _print_json(data)
        return
    u = parse(BudgetUsage, data, "GET /v1/budgets/usage")
    click.echo(f"lookback {format_duration(u.lookback_s)}, from the {u.source}"
               + ("; GPU kinds are billed: the ratios count CHARGED_UNITS" if u.billed else ""))
    units = ["CHARGED_UNITS"] if u.billed else []
    table(
        ["BUDGET", "SHARE", "CHARGED_GPU_H", *units, "FREE_GPU_H", "RATIO"],
        [["  " * b.path.count("/") + b.path.rsplit("/", 1)[-1],
          f"{format_figure(100 * b.share)}%", format_figure(b.charged_gpu_hours),
          *(["-" if b.charged_units is None else format_figure(b.charged_units)]
            if u.billed else []),
          format_figure(b.free_gpu_hours),
          "-" if b.usage_ratio is None else f"{b.usage_ratio:.2f}"]
         for b in u.budgets],
    )


# ---- hosts and audit -------------------------------------------------------------------------
@click.group(cls=HostsGroup)
def hosts() -> None:
    """Hosts: list, drain, repair."""


@hosts.command("list")
@json_option
@connection
def hosts_list(client: Client, as_json: bool) -> None:
    """List hosts with their pool (cluster/kind), state and GPUs in use."""
    data = client.json("GET", "/hosts")
    if as_json:
        _print_json(data)
        return
    table(["HOST", "POOL", "STATE", "GPUS", "USED", "SINCE", "REASON"],
          [[h.name, h.pool or "-", h.state, h.gpus, h.gpus_used, fmt_time(h.changed_at),
            h.reason or "-"]
           for h in parse_list(HostInUse, data, "GET /v1/hosts")])


@hosts.command("drain")
@click.argument("name", type=NAME)
@click.option("--reason", default="", help="why (kept in the audit log)")
@answer_json_option
@connection
def hosts_drain(client: Client, name: str, reason: str, as_json: bool) -> None:
    """Drain a host: no new work; it empties as protections end, then goes to repair."""
    write(client, Host, "POST", f"/hosts/{url_part(name)}/drain", {"reason": reason}, as_json,
          _drained, {"reason": "--reason"})


def _drained(h: Host) -> str:
    """What ``hosts drain`` says of the host it was answered."""
    if h.state in ("repair", "down"):
        return (f"{h.name}: {h.state} already "
                f"({escape_controls(h.reason) or 'no reason given'}): it takes "
                f"no work; apportion hosts repair {h.name} puts it back in service")
    return f"{h.name}: {h.state}"


@hosts.command("repair")
@click.argument("name", type=NAME)
@click.option("--reason", default="", help="what was done (kept in the audit log)")
@answer_json_option
@connection
def hosts_repair(client: Client, name: str, reason: str, as_json: bool) -> None:
    """Mark a host repaired: healthy again (also calls off a drain)."""
    write(client, Host, "POST", f"/hosts/{url_part(name)}/repair", {"reason": reason},
          as_json, lambda h: f"{h.name}: {h.state}", {"reason": "--reason"})


@click.command()
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="how many of the newest entries to print (older ones left out are said "
                   "on stderr)")
@click.option("--target", default=None,
              help="only entries about this budget/host/user/workload (5 or w-5: w-000005, "
                   "unless something of that very name has entries)")
@click.option("--actor", default=None, help="only entries by this user (or scheduler, config)")
@click.option("--action", default=None,
              help="only this action (budget.weight) or family (budget: every budget.*)")
@click.option("--from", "start", default=None, metavar="WHEN",
              help="only entries at or after: 2026-11-01, 2026-11-01T08:00 (UTC unless an "
                   "offset is given: 2026-11-01T08:00+05:30), 30d (ago)")
@click.option("--to", "end", default=None, metavar="WHEN", help="only entries before; as --from")
@json_option
@connection
def audit(client: Client, limit: int, target: str | None, actor: str | None,
          action: str | None, start: str | None, end: str | None, as_json: bool) -> None:
    """Who changed what, when (newest first): the --limit newest entries, of a target, by
    an actor, of an action, in a period."""
    from apportion.service.accounting import ReportError, parse_time

    now = time.time()
    try:  # here, as report usage reads them: so that an empty page can say what was searched
        since = None if start is None else parse_time(start, "--from", now)
        until = None if end is None else parse_time(end, "--to", now)
    except ReportError as e:  # bad input, exit 2, as report usage refuses the same text
        raise BadInput(str(e)) from None
    if since is not None and until is not None and since >= until:
        # as report usage says it: the server's 422 would name epoch seconds never typed
        raise BadInput(f"--from: {start} is not before --to ({end})")
    query = {"actor": actor, "action": action,
             "from": None if since is None else repr(since),
             "to": None if until is None else repr(until)}
    typed = {"actor": "--actor", "action": "--action", "target": "--target"}
    wid = workload_id(target) if target else None
    # a short workload id: budgets, hosts and users may be named "5" or "w-5" too, so it
    # is read as a workload's only when nothing of that very name has entries
    short = wid is not None and wid != target
    try:
        data, more = client.pages("/audit", {"target": target, **query}, "before",
                                  AUDIT_PAGE, most=limit)
    except click.ClickException as e:  # "actor: no user ...": named as typed
        if not (short and e.message.startswith("target:")):
            raise as_typed(e, typed) from None
        data, more = [], False
    if not data and short:
        try:
            data, more = client.pages("/audit", {"target": wid, **query}, "before",
                                      AUDIT_PAGE, most=limit)
        except click.ClickException as e:  # neither name: both said, as typed first
            e = as_typed(e, typed)
            raise reworded(e, e.message.replace(repr(wid), f"{target!r} (or {wid!r})", 1)
                           ) from None
    if more:
        click.echo(f"the {limit} newest entries; older ones left out (raise --limit)",
                   err=True)
    if not data and (since is not None or until is not None):
        click.echo(f"no entries {_searched(start, since, end, until)}", err=True)
    if as_json:
        _print_json(data)
        return
    if not data:  # a sentence, not a bare header, as queue says "no active workloads"
        click.echo("no entries")
        return

    def brief(v: Any) -> str:
        if isinstance(v, dict):  # a time (expires_at) as every time is shown, not epoch seconds
            v = {k: fmt_time(x) if k.endswith("_at") and isinstance(x, int | float)
                 and not isinstance(x, bool) else x for k, x in v.items()}
        return "-" if v is None else json.dumps(v, sort_keys=True)

    table(["WHEN", "ACTOR", "ACTION", "TARGET", "OLD", "NEW"],
          [[fmt_time(a.at), a.actor, a.action, a.target, brief(a.old), brief(a.new)]
           for a in parse_list(AuditEntry, data, "GET /v1/audit")])


def _searched(start: str | None, since: float | None, end: str | None,
              until: float | None) -> str:
    """The period an audit searched, each end in this machine's zone with the flag as
    typed: ``at or after 2026-12-07 05:30:00+05:30 (--from 2026-12-07)``; a date or time
    without an offset is UTC, which the period's offset makes plain."""
    parts = []
    if since is not None:
        parts.append(f"at or after {fmt_time(since)} (--from {start})")
    if until is not None:
        parts.append(f"before {fmt_time(until)} (--to {end})")
    return (" and ".join(parts) + "; a date or time without an offset is read as UTC")


# ---- users and tokens (admins) --------------------------------------------------------------
def _user_line(u: User) -> str:
    return f"{u.name}: admin {'yes' if u.admin else 'no'}, runs as {u.account}"


def _cannot_run(u: User) -> str:
    """Why the server would refuse the user's work now, without the "user NAME: " the
    submission's refusal starts with."""
    return (u.cannot_run or "").removeprefix(f"user {u.name}: ")


def _warn_cannot_run(u: User) -> None:
    if u.cannot_run:
        click.echo(f"warning: {u.name}'s work cannot run until this is fixed: "
                   f"{_cannot_run(u)}", err=True)


@click.group(cls=UsersGroup)
def users() -> None:
    """Users (admins): add, list, set."""


@users.command("add")
@click.argument("name")
@click.option("--admin", is_flag=True, help="may do everything")
@click.option("--unix-user", default=None, help="Unix account its work runs as (default: NAME)")
@answer_json_option
@connection
def users_add(client: Client, name: str, admin: bool, unix_user: str | None,
              as_json: bool) -> None:
    """Add a user (then give it a token: apportion tokens create NAME)."""
    u = write(client, User, "POST", "/users",
              {"name": name, "admin": admin, "unix_user": unix_user}, as_json,
              lambda u: f"added {_user_line(u)}", {"name": "NAME", "unix_user": "--unix-user"})
    _warn_cannot_run(u)


@users.command("list")
@json_option
@connection
def users_list(client: Client, as_json: bool) -> None:
    """List users with their admin flag, Unix account and whether their work can run."""
    data = client.json("GET", "/users")
    if as_json:
        _print_json(data)
        return
    table(["USER", "ADMIN", "UNIX_USER", "CAN_RUN"],
          [[u.name, "yes" if u.admin else "no", u.account,
            f"no: {_cannot_run(u)}" if u.cannot_run else "yes"]
           for u in parse_list(User, data, "GET /v1/users")])


@users.command("set")
@click.argument("name", type=NAME)
@click.option("--admin/--no-admin", default=None, help="grant or take away admin rights")
@click.option("--unix-user", default=None,
              help='Unix account its work runs as ("" for the account named NAME)')
@answer_json_option
@connection
def users_set(client: Client, name: str, admin: bool | None, unix_user: str | None,
              as_json: bool) -> None:
    """Change a user's admin flag or Unix account (takes effect at once)."""
    body: dict[str, Any] = {}
    if admin is not None:
        body["admin"] = admin
    if unix_user is not None:
        body["unix_user"] = unix_user
    if not body:
        raise click.UsageError("nothing to change: give --admin/--no-admin or --unix-user")
    u = write(client, User, "PATCH", f"/users/{url_part(name)}", body, as_json, _user_line,
              {"unix_user": "--unix-user"})
    _warn_cannot_run(u)


@click.group(cls=TokensGroup)
def tokens() -> None:
    """Tokens: create (admins), list, revoke."""


def expiry(text: str, now: float) -> dict[str, Any]:
    """``--expires`` as the API takes it: a lifetime (``90d``, ``12h``, a number of seconds)
    as ``expires_in``, sent as typed for the server to count from its own clock; a date or
    a date and time (``accounting.parse_time``: UTC unless it says otherwise) as
    ``expires_at``. :class:`BadInput` for anything else."""
    from apportion.core import parse_duration
    from apportion.service.accounting import ReportError, parse_time

    given = text.strip()
    a_day = len(given) == 8 and given.isdigit()  # 20261231: a date, not 234 days
    if ":" not in given and not a_day:  # 20:00 is no lifetime: a time of day, not taken
        try:
            parse_duration(given)
            return {"expires_in": given}
        except ValueError:
            pass
    if _NEGATIVE_NUMBER.match(given):  # -1: a lifetime of -1 s, not 1 s before 1970
        raise BadInput(f"--expires: must be a lifetime > 0, got {text!r}")
    try:
        return {"expires_at": parse_time(given, "--expires", now)}
    except ReportError as e:
        if a_day:
            raise BadInput(str(e)) from None
        raise BadInput(f"--expires: must be a lifetime (90d, 12h, 1h30m) or a date (2026-12-31) "
                       "or a date and time (2026-12-31T18:00, UTC unless it says otherwise), "
                       f"got {text!r}") from None


def _expires(t: Token) -> str:
    """A token's EXPIRES cell: never, when, or that it has (on the server's clock)."""
    if t.expires_at is None:
        return "never"
    return f"expired {fmt_time(t.expires_at)}" if t.expired else fmt_time(t.expires_at)


@tokens.command("create")
@click.argument("user", type=NAME)
@click.option("--kind", type=click.Choice(["user", "scrape"]), default="user",
              help="user: acts as USER; scrape: may only read (Prometheus)")
@click.option("--label", default="", help="what it is for (shown by tokens list)")
@click.option("--expires", default=None, metavar="WHEN",
              help="a lifetime (90d, 12h) or a date (2026-12-31, 2026-12-31T18:00; UTC unless "
                   "an offset is given); default: the server's [auth] max_token_lifetime, "
                   "else never")
@json_option
@connection
def tokens_create(client: Client, user: str, kind: str, label: str, expires: str | None,
                  as_json: bool) -> None:
    """Create a token for USER and print it (shown once: only its hash is kept)."""
    body: dict[str, Any] = {"kind": kind, "label": label}
    if expires is not None:
        body.update(expiry(expires, time.time()))
    try:
        data = client.json("POST", f"/users/{url_part(user)}/tokens", body)
    except click.ClickException as e:
        raise as_typed(e, {"expires_in": "--expires", "expires_at": "--expires",
                           "label": "--label"}) from None
    if as_json:
        _print_json(data)
        return
    t = parse(NewToken, data, f"POST /v1/users/{user}/tokens")
    click.echo(t.token)
    until = "" if t.expires_at is None else f", valid until {fmt_time(t.expires_at)}"
    click.echo(f"{t.id}: a {t.kind} token of {t.user}{until}; keep it secret, it is not "
               "shown again", err=True)


@tokens.command("list")
@click.option("--user", default=None, help="only this user's (admins: default all)")
@json_option
@connection
def tokens_list(client: Client, user: str | None, as_json: bool) -> None:
    """List tokens (never the secrets): admins all, others their own."""
    try:
        data = client.json("GET", "/tokens", params={"user": user})
    except click.ClickException as e:
        raise as_typed(e, {"user": "--user"}) from None
    if as_json:
        _print_json(data)
        return
    table(["ID", "USER", "KIND", "CREATED", "EXPIRES", "REVOKED", "LABEL"],
          [[t.id, t.user, t.kind, fmt_time(t.created_at), _expires(t), fmt_time(t.revoked_at),
            t.label or "-"] for t in parse_list(Token, data, "GET /v1/tokens")])


@tokens.command("revoke")
@click.argument("token_id", type=NAME)
@answer_json_option
@connection
def tokens_revoke(client: Client, token_id: str, as_json: bool) -> None:
    """Revoke a token by its id (from tokens list): refused from this moment."""
    write(client, Token, "POST", f"/tokens/{url_part(token_id)}/revoke", None, as_json,
          lambda t: f"revoked {t.id} ({t.kind} token of {t.user})")
