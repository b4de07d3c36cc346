"""How an object's body maps to the columns SQL can look into (labels, phase, owners, deletion)."""

from __future__ import annotations

from typing import Any

import orjson


def labels_of(body: dict[str, Any]) -> dict[str, str]:
    labels = body.get("metadata", {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def phase_of(body: dict[str, Any]) -> str | None:
    status = body.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    return phase if isinstance(phase, str) else None


def owner_uids_of(body: dict[str, Any]) -> list[str]:
    refs = body.get("metadata", {}).get("ownerReferences") or []
    return [str(ref["uid"]) for ref in refs if isinstance(ref, dict) and ref.get("uid")]


def deleting(body: dict[str, Any]) -> bool:
    return bool(body.get("metadata", {}).get("deletionTimestamp"))


def encode(body: dict[str, Any]) -> str:
    return orjson.dumps(body).decode()


def encode_labels(body: dict[str, Any]) -> str:
    return orjson.dumps(labels_of(body)).decode()


def encode_owner_uids(body: dict[str, Any]) -> str:
    """The owners' uids as a JSON array: one text per write in an array of writes (ADR 0056)."""
    return orjson.dumps(owner_uids_of(body)).decode()
