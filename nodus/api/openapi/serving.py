"""The endpoints ``/openapi/v2``, ``/openapi/v3`` and ``/openapi/v3/apis/nodus.dev/v1``.

Contract:

* Each document is built once per registry (so once per process) and kept as the serialized bytes
  it is served as (:func:`nodus.api.openapi.v3.serialize`), with its ETag: the quoted upper-case
  SHA-512 of those bytes. ``If-None-Match`` naming the current ETag (or ``*``) is answered 304.
* Documents are JSON. kubectl asks for ``/openapi/v2`` as protobuf only; a request that does not
  accept JSON at all (``application/json``, ``application/*`` or ``*/*`` with a non-zero q) gets
  406 NotAcceptable, on which clients fall back or do without the v2 document.
* The group document requested with ``?hash=`` equal to its current hash is immutable:
  ``Cache-Control: public, immutable``, ``Expires`` a year ahead and ``Vary: Accept``. A stale hash
  is redirected (301) to the current URL, as kube-apiserver does.
"""

from __future__ import annotations

import email.utils
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from nodus.api.errors import APIError
from nodus.api.negotiation import parse_media_types
from nodus.api.openapi.v2 import build_v2
from nodus.api.openapi.v3 import GROUP_URL, build_v3_group, build_v3_index, digest, serialize
from nodus.api.registry import Registry

_JSON_TYPES = ("application/json", "application/*", "*/*")
_YEAR_SECONDS = 365 * 24 * 3600


@dataclass(frozen=True)
class ServedDocument:
    """A document as served: its bytes and its hash (the ETag without quotes)."""

    body: bytes
    hash: str

    @property
    def etag(self) -> str:
        return f'"{self.hash}"'


_Builder = Callable[[Registry], dict[str, Any]]
_cache: weakref.WeakKeyDictionary[Registry, dict[_Builder, ServedDocument]] = weakref.WeakKeyDictionary()


def served(registry: Registry, build: _Builder) -> ServedDocument:
    """The document ``build`` makes for ``registry``, built on first use and then kept."""
    documents = _cache.setdefault(registry, {})
    if build not in documents:
        body = serialize(build(registry))
        documents[build] = ServedDocument(body, digest(body))
    return documents[build]


def accepts_json(accept: str | None) -> bool:
    for media in parse_media_types(accept):
        if media.type not in _JSON_TYPES:
            continue
        try:
            quality = float(media.params.get("q", "1"))
        except ValueError:
            quality = 1.0
        if quality > 0:
            return True
    return False


def _not_modified(request: Request, document: ServedDocument) -> bool:
    header = request.headers.get("if-none-match")
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or document.etag in tags


def _respond(request: Request, document: ServedDocument, headers: dict[str, str] | None = None) -> Response:
    if not accepts_json(request.headers.get("accept")):
        raise APIError(
            "NotAcceptable",
            f"the OpenAPI documents are served as application/json only (got {request.headers.get('accept')!r})",
        )
    all_headers = {"ETag": document.etag, **(headers or {})}
    if _not_modified(request, document):
        return Response(status_code=304, headers=all_headers)
    return Response(document.body, media_type="application/json", headers=all_headers)


def _registry(request: Request) -> Registry:
    registry: Registry = request.app.state.server.registry
    return registry


async def serve_v2(request: Request) -> Response:
    return _respond(request, served(_registry(request), build_v2))


async def serve_v3_index(request: Request) -> Response:
    return _respond(request, served(_registry(request), build_v3_index))


async def serve_v3_group(request: Request) -> Response:
    document = served(_registry(request), build_v3_group)
    requested = request.query_params.get("hash")
    if requested is None:
        return _respond(request, document)
    if requested != document.hash:
        return RedirectResponse(f"{GROUP_URL}?hash={document.hash}", status_code=301)
    immutable = {
        "Cache-Control": "public, immutable",
        "Expires": email.utils.formatdate(time.time() + _YEAR_SECONDS, usegmt=True),
        "Vary": "Accept",
    }
    return _respond(request, document, immutable)
