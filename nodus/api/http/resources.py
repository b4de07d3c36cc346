"""The resource endpoints under ``/apis/nodus.dev/v1``: one handler per verb, all kinds alike.

A handler authenticates, resolves the path, authorises, decodes and checks the body's fields
against the kind's schema (``fieldValidation``), calls the generic store, and renders the result in
the representation the client accepts.

A kind whose stored object differs from what clients may see (``KindInfo.served``: Secret) is served
through that function on every path: get, list (built whole rather than streamed from the stored
bytes), write and delete responses, Tables and metadata-only forms. Patches and applies are computed
against the served form too, so that what a client reads is what its patch applies to.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from nodus.api import decoding, fieldmanagement, negotiation, patching, schemas, tables
from nodus.api.auth.principal import Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError, bad_request, method_not_allowed
from nodus.api.http import bodies, lists, paths, queries, streaming, watchaccess, watches
from nodus.api.http.authentication import authenticate
from nodus.api.http.paths import Target
from nodus.api.http.responses import docs_base, request_id, respond
from nodus.api.negotiation import Representation
from nodus.api.registry import API_VERSION, KindInfo
from nodus.api.server import APIServer
from nodus.api.store import GenericStore
from nodus.api.strategy import Object
from nodus.apimachinery.units import format_time, now

_FIELD_VALIDATION = ("Strict", "Warn", "Ignore")
# Problems named in a strict decoding error; a body with thousands of unknown fields gets a count beyond.
_MAX_PROBLEMS_SHOWN = 20


def _context(request: Request, principal: Principal) -> RequestContext:
    params = request.query_params
    dry_run = params.getlist("dryRun")
    for value in dry_run:
        if value != "All":
            raise bad_request(f'unsupported dry run value "{value}"; the only value is "All"')
    validation = params.get("fieldValidation") or "Warn"
    if validation not in _FIELD_VALIDATION:
        raise bad_request(f'fieldValidation must be Strict, Warn or Ignore, got "{validation}"')
    manager = params.get("fieldManager") or request.headers.get("user-agent", "unknown").split("/", 1)[0]
    if len(manager) > 128:
        raise bad_request("fieldManager must be at most 128 characters")
    return RequestContext(
        principal=principal,
        request_id=request_id(request),
        field_manager=manager or "unknown",
        dry_run=bool(dry_run),
        if_match=request.headers.get("if-match") if request.method == "POST" else None,
        field_validation=validation,  # type: ignore[arg-type]
    )


def check_fields(ctx: RequestContext, info: KindInfo, obj: Any, duplicates: list[str]) -> Any:
    """Apply ``fieldValidation`` to a decoded object: refuse (Strict), report (Warn) or silently
    drop (Ignore) fields the schema does not declare and fields given twice."""
    if not isinstance(obj, dict):
        return obj
    unknown = schemas.unknown_fields(obj, schemas.object_schema(info))
    problems = [f'unknown field "{path}"' for path, _ in unknown] + [f'duplicate field "{p}"' for p in duplicates]
    if problems and ctx.field_validation == "Strict":
        shown = problems[:_MAX_PROBLEMS_SHOWN]
        more = f" (and {len(problems) - len(shown)} more)" if len(problems) > len(shown) else ""
        raise bad_request(
            "strict decoding error: " + ", ".join(shown) + more,
            fix=f"Remove or rename the fields; `kubectl explain {info.plural}` lists the ones {info.kind} has.",
        )
    if ctx.field_validation == "Warn":
        for problem in problems:
            ctx.warn(problem)
    schemas.drop_fields(obj, unknown)
    return decoding.plain(obj)


def served(info: KindInfo, obj: Object) -> Object:
    """The object as clients see it (the kind's ``served`` function; most kinds: the object itself)."""
    return info.served(obj) if info.served is not None else obj


async def _body(request: Request, ctx: RequestContext, info: KindInfo, yaml_allowed: bool = True) -> Any:
    value, duplicates = await bodies.decode(request, yaml_allowed)
    return check_fields(ctx, info, value, duplicates)


def _render(
    obj: dict[str, Any],
    info: KindInfo,
    representation: Representation,
    status: int,
    ctx: RequestContext | None,
    include: str = "Metadata",
) -> Response:
    warnings = ctx.warnings if ctx else None
    headers = ctx.response_headers if ctx else None
    obj = served(info, obj)
    if representation == "table":
        return respond(tables.table(info, [obj], include), status, warnings=warnings, headers=headers)  # type: ignore[arg-type]
    if representation == "metadata":
        return respond(tables.row_object(obj, "Metadata"), status, warnings=warnings, headers=headers)
    return respond(obj, status, representation, warnings=warnings, headers=headers)


async def handle(request: Request) -> Response:
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    target = paths.parse(request.path_params["path"], server.registry)
    method = request.method
    request.scope["state"]["metrics"] = (_verb(method, target, request), target.info.plural)
    if target.legacy_watch and method != "GET":
        raise method_not_allowed(method, target.info.plural)
    if method == "GET":
        return await _get(server, request, principal, target)
    if method == "POST" and target.name is None:
        return await _create(server, request, principal, target)
    if method == "PUT" and target.name is not None:
        return await _update(server, request, principal, target)
    if method == "PATCH" and target.name is not None:
        return await _patch(server, request, principal, target)
    if method == "DELETE" and target.name is not None and not target.subresource:
        return await _delete(server, request, principal, target)
    if method == "DELETE" and target.name is None:
        return await _delete_collection(server, request, principal, target)
    raise method_not_allowed(method, target.info.plural)


def _verb(method: str, target: Target, request: Request) -> str:
    if method == "GET":
        if target.name is not None and not target.legacy_watch:
            return "get"
        return "watch" if target.legacy_watch or request.query_params.get("watch") in ("true", "1") else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(
        method, "delete" if target.name is not None else "deletecollection"
    )


def _check_verb(info: KindInfo, verb: str) -> None:
    """405 for a verb the kind does not serve. Checked after authorisation, as kube-apiserver does (its
    authorisation filter runs before the handler): a user who may not write a read-only kind hears why
    (403), an administrator that the kind has no such verb."""
    if verb not in info.verbs:
        raise method_not_allowed(verb, info.plural)


async def _get(server: APIServer, request: Request, principal: Principal, target: Target) -> Response:
    info = target.info
    representation = negotiation.representation(request.headers.get("accept"))
    verb = _verb("GET", target, request)
    await server.authorizer.authorize(
        principal,
        verb,
        info,
        target.namespace,
        target.name,
        target.subresource,
        label_selector=request.query_params.get("labelSelector", ""),
        field_selector=request.query_params.get("fieldSelector", ""),
    )
    _check_verb(info, verb)
    if verb == "get":
        obj = await server.stores[info.plural].get(target.namespace, target.name or "")
        return _render(obj, info, representation, 200, None, request.query_params.get("includeObject", "Metadata"))
    if info.namespaced and target.namespace is None and target.name is not None:
        raise bad_request("watching one object needs its project: /namespaces/<project>/...")
    options = queries.parse(request.query_params, info, watch_path=target.legacy_watch)
    readable = await server.authorizer.readable_projects(principal)
    if verb == "watch":
        slot = streaming.limits(request).acquire(principal, "watch")  # before the initial list is read
        try:
            return await watches.respond_watch(
                server,
                info,
                target.namespace,
                target.name,
                options,
                readable,
                representation,
                docs_base(request),
                request_id(request),
                slot,
                watchaccess.recheck(server.projects, principal, info, target.namespace, readable),
            )
        except BaseException:
            slot.release()
            raise
    query = await lists.build_query(server, info, target.namespace, options, readable)
    return await lists.respond_list(server, info, query, representation, options.include_object)


async def _create(server: APIServer, request: Request, principal: Principal, target: Target) -> Response:
    info = target.info
    if info.namespaced and target.namespace is None:
        raise bad_request(
            f"{info.plural} are created in a project: POST /apis/nodus.dev/v1/namespaces/<project>/{info.plural}",
            fix="Pass -n <project> to kubectl.",
        )
    ctx = _context(request, principal)
    await server.authorizer.authorize(principal, "create", info, target.namespace, None, seen=ctx.projects)
    _check_verb(info, "create")
    representation = negotiation.representation(request.headers.get("accept"))
    body = await _body(request, ctx, info)
    obj = await server.stores[info.plural].create(target.namespace, body, ctx)
    return _render(obj, info, representation, 201, ctx)


async def _update(server: APIServer, request: Request, principal: Principal, target: Target) -> Response:
    info = target.info
    await server.authorizer.authorize(principal, "update", info, target.namespace, target.name, target.subresource)
    _check_verb(info, "update")
    representation = negotiation.representation(request.headers.get("accept"))
    ctx = _context(request, principal)
    body = await _body(request, ctx, info)
    assert target.name is not None
    obj = await server.stores[info.plural].update(target.namespace, target.name, body, ctx, target.subresource)
    return _render(obj, info, representation, 200, ctx)


async def _patch(server: APIServer, request: Request, principal: Principal, target: Target) -> Response:
    info = target.info
    await server.authorizer.authorize(principal, "patch", info, target.namespace, target.name, target.subresource)
    _check_verb(info, "patch")
    representation = negotiation.representation(request.headers.get("accept"))
    ctx = _context(request, principal)
    kind = negotiation.content_type(request.headers.get("content-type"))
    store = server.stores[info.plural]
    assert target.name is not None
    if kind == negotiation.STRATEGIC_PATCH:
        raise APIError(
            "UnsupportedMediaType",
            "strategic merge patch is not supported for nodus.dev resources; use a merge patch "
            "(application/merge-patch+json), a JSON patch or server-side apply",
            fix="kubectl patch --type merge -p '{...}', kubectl patch --type json -p '[...]', or "
            "kubectl apply --server-side.",
        )
    if kind not in negotiation.PATCH_TYPES:
        raise APIError(
            "UnsupportedMediaType",
            f'the body of a PATCH must be one of {", ".join(negotiation.PATCH_TYPES)}, got "{kind}"',
        )
    raw, duplicates = await bodies.decode(request, yaml_allowed=kind == negotiation.APPLY_PATCH)
    if kind == negotiation.APPLY_PATCH:
        return await _apply(server, request, ctx, target, raw, duplicates, representation)
    patch_value = decoding.plain(raw)

    def patched(current: dict[str, Any]) -> dict[str, Any]:
        current = served(info, current)
        if kind == negotiation.MERGE_PATCH:
            if not isinstance(patch_value, dict):
                raise bad_request("a merge patch is a JSON object")
            result = patching.merge_patch(current, patch_value)
        else:
            result = patching.json_patch(current, patch_value)
        checked: dict[str, Any] = check_fields(ctx, info, result, duplicates)
        patching.check_size(checked)  # repeated patches may not grow an object past what a create could store
        return checked

    obj = await store.patch(target.namespace, target.name, patched, ctx, target.subresource)
    return _render(obj, info, representation, 200, ctx)


async def _apply(
    server: APIServer,
    request: Request,
    ctx: RequestContext,
    target: Target,
    raw: Any,
    duplicates: list[str],
    representation: Representation,
) -> Response:
    info = target.info
    store: GenericStore = server.stores[info.plural]
    assert target.name is not None
    if not request.query_params.get("fieldManager"):
        raise bad_request(
            "PATCH with application/apply-patch+yaml requires the fieldManager parameter",
            fix="kubectl apply --server-side sets it; with curl add ?fieldManager=<your-tool>.",
        )
    force = request.query_params.get("force", "").lower() in ("true", "1")
    applied = check_fields(ctx, info, raw, duplicates)
    if not isinstance(applied, dict):
        raise bad_request("an apply patch is an object")
    if applied.get("metadata", {}).get("name") not in (None, target.name):
        raise bad_request("the name in the applied object does not match the name on the URL")
    applied.setdefault("apiVersion", API_VERSION)
    applied.setdefault("kind", info.kind)
    applied.setdefault("metadata", {})["name"] = target.name

    def apply_to(live: dict[str, Any] | None) -> dict[str, Any]:
        try:
            merged = fieldmanagement.apply(
                served(info, live) if live is not None else None,
                applied,
                manager=ctx.field_manager,
                force=force,
                api_version=API_VERSION,
                list_keys=info.list_map_keys,
                now=format_time(now()),
                subresource=target.subresource,
            )
        except fieldmanagement.InvalidApplyConfiguration as invalid:
            raise bad_request(str(invalid)) from None
        except fieldmanagement.ApplyConflict as conflict:
            raise APIError(
                "FieldManagerConflict",
                conflict.message(),
                details={
                    "name": target.name,
                    "group": "nodus.dev",
                    "kind": info.plural,
                    "causes": conflict.causes(),
                },
            ) from None
        patching.check_size(merged)
        return merged

    try:
        obj = await store.patch(target.namespace, target.name, apply_to, ctx, target.subresource, owned=True)
        return _render(obj, info, representation, 200, ctx)
    except APIError as error:
        if error.reason != "NotFound" or target.subresource or error.details is None:
            raise
        if error.details.get("kind") != info.plural:
            raise
    await server.authorizer.authorize(ctx.principal, "create", info, target.namespace, None, seen=ctx.projects)
    created = await store.create(target.namespace, apply_to(None), ctx, owned=True)
    return _render(created, info, representation, 201, ctx)


async def _delete_options(request: Request) -> dict[str, Any]:
    options: dict[str, Any] = {}
    raw = await bodies.read(request)
    if raw.strip():
        value, _ = decoding.decode(raw, yaml_allowed=True)
        if not isinstance(value, dict):
            raise bad_request("the body of a DELETE is DeleteOptions")
        options = decoding.plain(value)
    params = request.query_params
    if params.get("propagationPolicy"):
        options["propagationPolicy"] = params["propagationPolicy"]
    if params.get("gracePeriodSeconds"):
        try:
            options["gracePeriodSeconds"] = int(params["gracePeriodSeconds"])
        except ValueError as exc:
            raise bad_request("gracePeriodSeconds must be an integer") from exc
    if params.get("orphanDependents") in ("true", "false") and "propagationPolicy" not in options:
        options["propagationPolicy"] = "Orphan" if params["orphanDependents"] == "true" else "Background"
    policy = options.get("propagationPolicy")
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise bad_request(f'propagationPolicy must be Orphan, Background or Foreground, got "{policy}"')
    grace = options.get("gracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        raise bad_request("gracePeriodSeconds must be a non-negative integer")
    return options


async def _delete(server: APIServer, request: Request, principal: Principal, target: Target) -> Response:
    info = target.info
    await server.authorizer.authorize(principal, "delete", info, target.namespace, target.name)
    _check_verb(info, "delete")
    ctx = _context(request, principal)
    options = await _delete_options(request)
    assert target.name is not None
    obj, gone = await server.stores[info.plural].delete(target.namespace, target.name, options, ctx)
    representation = negotiation.representation(request.headers.get("accept"))
    return _render(obj, info, representation, 200 if gone else 202, ctx)


async def _delete_collection(server: APIServer, request: Request, principal: Principal, target: Target) -> Response:
    info = target.info
    if info.namespaced and target.namespace is None:
        raise bad_request("deletecollection needs a project: /namespaces/<project>/" + info.plural)
    await server.authorizer.authorize(principal, "deletecollection", info, target.namespace, None)
    _check_verb(info, "deletecollection")
    ctx = _context(request, principal)
    options = await _delete_options(request)
    list_options = queries.parse(request.query_params, info)
    readable = await server.authorizer.readable_projects(principal)
    query = await lists.build_query(server, info, target.namespace, list_options, readable)
    async with server.listwatch.open_list(query) as cursor:
        names = [(row[0], row[1]) async for batch in cursor.batches() for row in batch]
    store = server.stores[info.plural]
    deleted = []
    for namespace, name in names:
        try:
            obj, _ = await store.delete(namespace or None, name, options, ctx)
        except APIError as error:
            if error.reason == "NotFound":
                continue
            raise
        deleted.append(served(info, obj))
    body = {"kind": info.list_kind, "apiVersion": API_VERSION, "metadata": {}, "items": deleted}
    return respond(body, 200, warnings=ctx.warnings)
