"""Attempt logs over HTTP: agents append lines, users read them as plain text like ``kubectl logs``.

* ``POST   .../namespaces/{p}/attempts/{name}/log`` (administrators: agents and controllers) appends
  ``{"entries": [{"stream": "stdout"|"stderr", "time": "<RFC 3339>", "line": "...", "container": "..."}]}``,
  at most ``MAX_ENTRIES`` per request; 204 when stored. ``container`` is optional: '' (the default) is
  the main program, otherwise an init command or sidecar named like a DNS label (``init``,
  ``sidecar-proxy``).
* ``GET    .../namespaces/{p}/attempts/{name}/log`` and ``.../jobs/{name}/log?index=&attempt=&rank=`` (a
  Viewer of the project) return ``text/plain``: one line per entry, interleaved by seq, with
  ``follow``, ``tailLines``, ``sinceSeconds``/``sinceTime``, ``timestamps``, ``limitBytes`` and
  ``stream`` (``stdout``, ``stderr`` or ``All``). ``container`` picks one program (default '': the main
  program; ``kubectl logs -c NAME`` sends it); ``allContainers=true`` returns every program's lines,
  those of other containers than the main program prefixed ``[NAME] ``. A Job's attempt that does not
  exist yet is a 404 ``NotFound``; while the Job may still start it (it has not finished, is not being
  deleted, and has that index and rank) the Status carries ``details.retryAfterSeconds``, on which
  ``nodus logs -f`` waits, as ``kubectl logs -f job/NAME`` waits for a pod to run.

Filters apply in this order: container, stream and since, then ``tailLines`` (the newest lines that passed),
then ``limitBytes`` on the bytes sent (a line may be cut). Lines are read by
:class:`~nodus.api.attemptlogs.Logs`: the first page before the response starts, so a failure there is a
Status; later pages are streamed as they are read. ``follow`` ends once the attempt is in a terminal phase (or
gone) and every line it had stored by then is sent, or when the client disconnects. A user may follow at most
``--max-log-follows-per-user`` logs at once on one API server process (429 beyond).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from nodus.api.attemptlogs import STREAMS, LogEntry, LogLine, LogOptions, LogReader
from nodus.api.auth.nodes import Attributes
from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError, bad_request, method_not_allowed
from nodus.api.http import streaming
from nodus.api.http.authentication import authenticate
from nodus.api.http.streaming import Slot
from nodus.api.registry import GROUP, KindInfo
from nodus.api.server import APIServer
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apimachinery.units import now, parse_time

log = logging.getLogger(__name__)

MAX_ENTRIES = 1000
# 1000 lines of the longest stored length (16 KiB) with room for JSON escaping.
MAX_BODY_BYTES = 24 * 1024 * 1024

_ENTRY_SHAPE = (
    '{"stream": "stdout"|"stderr", "time": "<RFC 3339 time with zone>", "line": "<text>", "container": "<optional>"}'
)
_STREAM_VALUES = {"stdout": "stdout", "stderr": "stderr", "all": None}
_MAX_CAUSES = 20
_CONTAINER = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LARGEST = 2**62


def _bool(params: QueryParams, key: str) -> bool:
    value = params.get(key, "").lower()
    if value in ("true", "1", "t"):
        return True
    if value in ("false", "0", "f", ""):
        return False
    raise bad_request(f'{key} must be true or false, got "{params[key]}"', fix=f"Pass {key}=true or {key}=false.")


def int_param(params: QueryParams, key: str, minimum: int) -> int | None:
    """The integer query parameter ``key`` (None when absent); a 400 Status when it is below ``minimum``
    or not an integer. Values beyond any log's size are clamped."""
    if key not in params:
        return None
    try:
        value = int(params[key])
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise bad_request(
            f'{key} must be an integer of at least {minimum}, got "{params[key]}"',
            fix=f"Pass {key} as a whole number >= {minimum}, or leave it out.",
        )
    return min(value, _LARGEST)  # more lines, bytes or seconds than any log holds mean "all"


def parse_options(params: QueryParams) -> LogOptions:
    """The log options of a GET; a 400 Status naming the parameter when one is malformed."""
    since_seconds = int_param(params, "sinceSeconds", 1)
    since_time: datetime | None = None
    if "sinceTime" in params:
        if since_seconds is not None:
            raise bad_request(
                "at most one of sinceTime or sinceSeconds may be specified",
                fix="Keep sinceSeconds (relative) or sinceTime (absolute), not both.",
            )
        try:
            since_time = parse_time(params["sinceTime"])
        except ValueError as exc:
            raise bad_request(f"sinceTime: {exc}", fix="Pass an RFC 3339 time such as 2026-11-29T12:00:00Z.") from exc
    elif since_seconds is not None:
        with contextlib.suppress(OverflowError):  # further back than datetime goes: every line
            since_time = now() - timedelta(seconds=since_seconds)
    raw_stream = params.get("stream", "All")
    if raw_stream.lower() not in _STREAM_VALUES:
        raise bad_request(
            f'stream must be stdout, stderr or All, got "{raw_stream}"',
            fix="Pass stream=stdout, stream=stderr or leave it out for both streams.",
        )
    container = params.get("container", "")
    if container and not _CONTAINER.fullmatch(container):
        raise bad_request(
            f'container must be a lower-case DNS label such as "init" or "sidecar-proxy", got "{container}"',
            fix="Pass container=NAME for an init command or a sidecar, or leave it out for the main program.",
        )
    all_containers = _bool(params, "allContainers")
    if all_containers and container:
        raise bad_request(
            "at most one of container or allContainers=true may be specified",
            fix="Keep container=NAME for one program, or allContainers=true for every program.",
        )
    return LogOptions(
        follow=_bool(params, "follow"),
        tail_lines=int_param(params, "tailLines", 0),
        since_time=since_time,
        timestamps=_bool(params, "timestamps"),
        limit_bytes=int_param(params, "limitBytes", 1),
        stream=_STREAM_VALUES[raw_stream.lower()],
        container=None if all_containers else container,
    )


# --- appending -----------------------------------------------------------------------------------


async def _read_body(request: Request) -> bytes:
    too_large = APIError(
        "RequestEntityTooLarge",
        f"the request body is larger than {MAX_BODY_BYTES} bytes, the limit for a log append",
        fix=f"Send fewer entries per request (at most {MAX_ENTRIES}, and fewer when lines are long).",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _entry(value: Any, path: Path, problems: list[FieldError]) -> LogEntry | None:
    if not isinstance(value, dict):
        problems.append(fieldpath.invalid(path, None, f"must be an object {_ENTRY_SHAPE}"))
        return None
    found = len(problems)
    stream, time, line = value.get("stream"), value.get("time"), value.get("line")
    container = value.get("container", "")
    if container is None:
        container = ""
    if not isinstance(container, str):
        problems.append(fieldpath.invalid(path.child("container"), None, "must be a string"))
    elif container and not _CONTAINER.fullmatch(container):
        problems.append(
            fieldpath.invalid(
                path.child("container"), container, "must be '' (the main program) or a lower-case DNS label"
            )
        )
    if stream is None:
        problems.append(fieldpath.required(path.child("stream"), 'one of "stdout", "stderr"'))
    elif stream not in STREAMS:
        problems.append(fieldpath.not_supported(path.child("stream"), stream, STREAMS))
    parsed: datetime | None = None
    if time is None:
        problems.append(fieldpath.required(path.child("time"), "when the line was read, in RFC 3339"))
    else:
        try:
            parsed = parse_time(time)
        except ValueError:
            problems.append(
                fieldpath.invalid(
                    path.child("time"), time, 'must be an RFC 3339 time with a zone, e.g. "2026-11-29T12:00:00.123456Z"'
                )
            )
    if line is None:
        problems.append(fieldpath.required(path.child("line"), "the text of the line (may be empty)"))
    elif not isinstance(line, str):
        problems.append(fieldpath.invalid(path.child("line"), None, "must be a string"))
    if len(problems) > found or parsed is None or not isinstance(line, str) or not isinstance(container, str):
        return None
    # A line is one line: the newline that ended it is not part of it.
    text = line[:-2] if line.endswith("\r\n") else line[:-1] if line.endswith("\n") else line
    return LogEntry(str(stream), parsed, text, container)


def parse_entries(body: bytes, name: str) -> list[LogEntry]:
    """The entries of an append body; a 400 (not JSON), 413 (too many) or 422 (a bad field) Status."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(
            f"the body is not valid JSON: {exc}", fix=f'Send {{"entries": [{_ENTRY_SHAPE}, ...]}}.'
        ) from exc
    problems: list[FieldError] = []
    entries: list[LogEntry] = []
    raw = value.get("entries") if isinstance(value, dict) else None
    if not isinstance(value, dict):
        problems.append(fieldpath.invalid(Path("entries"), None, "the body must be an object with entries"))
    elif raw is None:
        problems.append(fieldpath.required(Path("entries"), "a list of log entries"))
    elif not isinstance(raw, list):
        problems.append(fieldpath.invalid(Path("entries"), None, "must be a list"))
    elif len(raw) > MAX_ENTRIES:
        raise APIError(
            "RequestEntityTooLarge",
            f"entries: {len(raw)} log entries in one request; the limit is {MAX_ENTRIES}",
            fix=f"Split the batch: send at most {MAX_ENTRIES} entries per request.",
            details={"name": name, "group": GROUP, "kind": "attempts"},
        )
    else:
        for i, item in enumerate(raw):
            entry = _entry(item, Path("entries").index(i), problems)
            if entry is not None:
                entries.append(entry)
    if problems:
        shown = problems[:_MAX_CAUSES]
        more = f" (and {len(problems) - len(shown)} more)" if len(problems) > len(shown) else ""
        fields = ", ".join(dict.fromkeys(p.field for p in shown))
        raise APIError(
            "Invalid",
            f'log entries for attempts.{GROUP} "{name}" are invalid: '
            + "; ".join(f"{p.field}: {p.message()}" for p in shown)
            + more,
            fix=f'Fix {fields}; the body is {{"entries": [{_ENTRY_SHAPE}, ...]}}.',
            details={
                "name": name,
                "group": GROUP,
                "kind": "attempts",
                "causes": [{"reason": p.type.value, "message": p.message(), "field": p.field} for p in shown],
            },
        )
    return entries


# --- reading -------------------------------------------------------------------------------------


def _stamp(value: datetime) -> str:
    # RFC 3339 with nine fraction digits, as kubelet prints them; storage keeps microseconds.
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _labelled(line: LogLine) -> LogLine:
    return replace(line, line=f"[{line.container}] {line.line}") if line.container else line


async def _chunks(reader: LogReader, options: LogOptions) -> AsyncIterator[bytes]:
    """The log's pages as ``text/plain``: one line per entry, with its time when asked, cut at ``limitBytes``."""
    remaining = options.limit_bytes
    # With allContainers, lines of other programs than the main one carry their container's name.
    labelled = options.container is None
    async for page in reader.pages():
        lines = [_labelled(line) for line in page] if labelled else page
        if options.timestamps:
            text = "".join(f"{_stamp(line.time)} {line.line}\n" for line in lines)
        else:
            text = "".join(f"{line.line}\n" for line in lines)
        data = text.encode()
        if remaining is not None:
            data = data[:remaining]
            remaining -= len(data)
        yield data
        if remaining == 0:
            return


class LogResponse(Response):
    """A ``text/plain`` stream that ends with the log, or at once when the client disconnects.

    The ``Nodus-Attempt`` header names the attempt's number, so a reader that asked for the latest attempt knows
    which one it got (and which number a replacement must exceed).
    """

    def __init__(self, reader: LogReader, options: LogOptions, slot: Slot | None, number: object) -> None:
        super().__init__(status_code=200, media_type="text/plain; charset=utf-8")
        self._reader = reader
        self._options = options
        self._slot = slot
        self._number = number

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"cache-control", b"no-cache, private"),
            (b"x-content-type-options", b"nosniff"),
        ]
        if isinstance(self._number, int):
            headers.append((b"nodus-attempt", str(self._number).encode()))
        try:
            await streaming.stream(receive, send, headers, lambda: self._pump(send), f"the log of {self._reader.name}")
        finally:
            if self._slot is not None:
                self._slot.release()

    async def _pump(self, send: Any) -> None:
        async for data in _chunks(self._reader, self._options):
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})


async def _serve(request: Request, principal: Principal, attempt: dict[str, Any], options: LogOptions) -> Response:
    """The log response; a followed log holds one of the user's follow slots until it ends (ADR 0033)."""
    slot = streaming.limits(request).acquire(principal, "follow") if options.follow else None
    server: APIServer = request.app.state.server
    try:
        reader = await server.logs.open(attempt, options)
    except BaseException:
        if slot is not None:
            slot.release()
        raise
    return LogResponse(reader, options, slot, (attempt.get("spec") or {}).get("number"))


# --- endpoints -----------------------------------------------------------------------------------


def _kind(server: APIServer, plural: str, request: Request) -> KindInfo:
    info = server.registry.by_plural(plural)
    if info is None:
        raise APIError(
            "NotFound",
            f"the server could not find the requested resource ({request.url.path})",
            fix="`kubectl api-resources --api-group=nodus.dev` lists the resources this server serves.",
        )
    return info


async def attempt_log(request: Request) -> Response:
    """``GET`` (read) and ``POST`` (append) ``/apis/nodus.dev/v1/namespaces/{namespace}/attempts/{name}/log``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    info = _kind(server, "attempts", request)
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    verb = {"GET": "get", "POST": "create"}.get(request.method)
    if verb is None:
        raise method_not_allowed(request.method.lower(), f"{info.plural}/log")
    request.scope["state"]["metrics"] = (verb, f"{info.plural}/log")
    if verb == "create":
        if not await server.authorizer.system(Attributes(principal, "create", info.plural, namespace, name, "log")):
            raise _append_refused(principal, info, namespace)
        attempt = await server.stores[info.plural].get(namespace, name)
        entries = parse_entries(await _read_body(request), name)
        await server.logs.append(attempt, entries)
        return Response(status_code=204)
    await server.authorizer.authorize(principal, "get", info, namespace, name, "log")
    options = parse_options(request.query_params)
    return await _serve(request, principal, await server.stores[info.plural].get(namespace, name), options)


def _append_refused(principal: Principal, info: KindInfo, namespace: str) -> APIError:
    """Lines are appended by the node agent that runs the attempt (and administrators), never by users."""
    return APIError(
        "Forbidden",
        f'{info.plural}.{GROUP} is forbidden: User "{principal.user}" cannot create resource "{info.plural}/log" in '
        f'API group "{GROUP}" in project "{namespace}"',
        fix="Only the node agent that runs the attempt appends its log lines.",
        details={"group": GROUP, "kind": info.plural},
    )


async def job_log(request: Request) -> Response:
    """``GET /apis/nodus.dev/v1/namespaces/{namespace}/jobs/{name}/log?index=&attempt=&rank=``: the log of
    the attempt with that number (default: the latest) of that index (default 0); for a gang, of that rank
    (default 0) of that epoch."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    jobs = _kind(server, "jobs", request)
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    if request.method != "GET":
        raise method_not_allowed(request.method.lower(), f"{jobs.plural}/log")
    request.scope["state"]["metrics"] = ("get", f"{jobs.plural}/log")
    await server.authorizer.authorize(principal, "get", jobs, namespace, name, "log")
    params = request.query_params
    options = parse_options(params)
    index = int_param(params, "index", 0) or 0
    number = int_param(params, "attempt", 1)
    rank = int_param(params, "rank", 0) or 0
    job = await server.stores[jobs.plural].get(namespace, name)
    attempt = await server.logs.attempt_of(job, index, number, rank)
    return await _serve(request, principal, attempt, options)
