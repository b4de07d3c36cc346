"""Table output (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``) from printer columns.

kubectl asks for Tables for ``get`` and ``get -w``: the server computes the cells, so every client
sees the same columns. Date columns are shown as ages (``5m``, ``3h``) as kube-apiserver does for
CustomResources. In a watch, only the first Table carries the column definitions.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from nodus.api.registry import KindInfo
from nodus.apimachinery.units import now, parse_time

IncludeObject = Literal["None", "Metadata", "Object"]

NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a project. It is required when creating resources.",
    "priority": 0,
}


def human_age(timestamp: Any, at: datetime | None = None) -> str:
    """Kubernetes' HumanDuration of the time since ``timestamp`` (``<unknown>`` when absent)."""
    if not isinstance(timestamp, str):
        return "<unknown>"
    try:
        seconds = int(((at or now()) - parse_time(timestamp)).total_seconds())
    except ValueError:
        return "<invalid>"
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if days < 365 * 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def column_definitions(info: KindInfo) -> list[dict[str, Any]]:
    columns = [dict(NAME_COLUMN)]
    for column in info.printer_columns:
        columns.append(
            {
                "name": column.name,
                "type": "string" if column.type == "date" else column.type,
                "format": column.format,
                "description": column.description,
                "priority": column.priority,
            }
        )
    return columns


def cells(info: KindInfo, obj: dict[str, Any]) -> list[Any]:
    out: list[Any] = [obj.get("metadata", {}).get("name", "")]
    for column in info.printer_columns:
        value = column.extract(obj)
        if column.type == "date":
            value = human_age(value) if value is not None else "<unknown>"
        out.append(value)
    return out


def row_object(obj: dict[str, Any], include: IncludeObject) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    metadata = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}


def table(
    info: KindInfo,
    objects: Iterable[dict[str, Any]],
    include: IncludeObject,
    headers: bool = True,
    list_metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": cells(info, obj)}
        embedded = row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata or {},
        "columnDefinitions": column_definitions(info) if headers else [],
        "rows": rows,
    }
