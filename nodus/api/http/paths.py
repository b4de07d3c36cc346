"""Parsing resource paths under ``/apis/nodus.dev/v1``."""

from __future__ import annotations

from dataclasses import dataclass

from nodus.api.errors import APIError
from nodus.api.registry import KindInfo, Registry


@dataclass(frozen=True)
class Target:
    info: KindInfo
    namespace: str | None  # None: every project (or a cluster-scoped kind)
    name: str | None
    subresource: str
    legacy_watch: bool = False


def _not_found(path: str) -> APIError:
    return APIError(
        "NotFound",
        f"the server could not find the requested resource ({path})",
        fix="`kubectl api-resources --api-group=nodus.dev` lists the resources this server serves.",
    )


def parse(path: str, registry: Registry) -> Target:
    """``[watch/][namespaces/<ns>/]<plural>[/<name>[/<subresource>]]``.

    A NUL anywhere is a resource that cannot exist (no name or project may hold one, and PostgreSQL's text
    refuses it): 404 here, before a list has started streaming its answer."""
    if "\x00" in path:
        raise _not_found(path.replace("\x00", "%00"))
    segments = [s for s in path.split("/") if s]
    legacy_watch = bool(segments) and segments[0] == "watch"
    if legacy_watch:
        segments = segments[1:]
    namespace = None
    if len(segments) >= 3 and segments[0] == "namespaces":
        namespace, segments = segments[1], segments[2:]
    if not segments or len(segments) > 3:
        raise _not_found(path)
    info = registry.by_plural(segments[0])
    if info is None:
        raise _not_found(path)
    if namespace is not None and not info.namespaced:
        raise _not_found(path)
    name = segments[1] if len(segments) > 1 else None
    subresource = segments[2] if len(segments) > 2 else ""
    if subresource and (subresource != "status" or not info.has_status):
        raise _not_found(path)
    return Target(info, namespace, name, subresource, legacy_watch)
