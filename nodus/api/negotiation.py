"""Content negotiation: which representation a client accepts, and what a request body is.

Responses are JSON (the default), YAML, a ``meta.k8s.io/v1`` Table, or PartialObjectMetadata.
Protobuf is not offered: Kubernetes clients fall back to JSON when it is listed after protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nodus.api.errors import APIError

Representation = Literal["json", "yaml", "table", "metadata"]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (MERGE_PATCH, JSON_PATCH, APPLY_PATCH)


@dataclass(frozen=True)
class MediaType:
    type: str
    params: dict[str, str]


def parse_media_types(header: str | None) -> list[MediaType]:
    if not header:
        return [MediaType("*/*", {})]
    out = []
    for part in header.split(","):
        pieces = [p.strip() for p in part.split(";")]
        if not pieces[0]:
            continue
        params: dict[str, str] = {}
        for piece in pieces[1:]:
            key, _, value = piece.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        out.append(MediaType(pieces[0].lower(), params))
    return out


def representation(accept: str | None) -> Representation:
    """The first representation in the Accept header that this server can produce; 406 if none."""
    for media in parse_media_types(accept):
        if media.type in ("application/json", "*/*", "application/*"):
            kind = media.params.get("as")
            group = media.params.get("g")
            if kind is None:
                return "json"
            if kind == "Table" and group == "meta.k8s.io" and media.params.get("v") in ("v1", "v1beta1"):
                return "table"
            if kind in ("PartialObjectMetadata", "PartialObjectMetadataList") and group == "meta.k8s.io":
                return "metadata"
            continue
        if media.type in ("application/yaml", "text/yaml"):
            return "yaml"
    raise APIError(
        "NotAcceptable",
        f"only the following media types are accepted: application/json, application/yaml, "
        f"application/json;as=Table;v=v1;g=meta.k8s.io (got {accept!r})",
    )


def content_type(header: str | None) -> str:
    if not header:
        return "application/json"
    return header.split(";", 1)[0].strip().lower()
