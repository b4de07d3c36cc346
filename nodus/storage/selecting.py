"""Translating label and field selectors into SQL over the ``labels``/``phase`` columns.

The same predicate serves the live table and the rebuilt snapshot of a paged list, which exposes
the same column names. Parameters are appended to a shared list, so a predicate composes into any
statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from nodus.apimachinery.selectors import FieldSelector, LabelSelector, Operator

# Field selector keys every kind may support, and the column each one reads.
FIELD_COLUMNS = {"metadata.name": "name", "metadata.namespace": "namespace", "status.phase": "phase"}


@dataclass
class Params:
    """Positional parameters of a statement under construction (``$1``, ``$2``, ...)."""

    values: list[Any] = field(default_factory=list)

    def add(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def label_predicate(selector: LabelSelector, params: Params, column: str = "labels") -> list[str]:
    clauses = []
    for req in selector.requirements:
        uses_key = req.operator not in (Operator.EQUALS, Operator.NOT_EQUALS)
        key = params.add(req.key) if uses_key else ""
        match req.operator:
            case Operator.EQUALS:
                doc = params.add(orjson.dumps({req.key: req.values[0]}).decode())
                clauses.append(f"{column} @> {doc}::jsonb")
            case Operator.NOT_EQUALS:
                doc = params.add(orjson.dumps({req.key: req.values[0]}).decode())
                clauses.append(f"NOT ({column} @> {doc}::jsonb)")
            case Operator.IN:
                values = params.add(list(req.values))
                clauses.append(f"({column} ->> {key}) = ANY({values}::text[])")
            case Operator.NOT_IN:
                values = params.add(list(req.values))
                clauses.append(f"NOT coalesce(({column} ->> {key}) = ANY({values}::text[]), false)")
            case Operator.EXISTS:
                clauses.append(f"{column} ? {key}")
            case Operator.DOES_NOT_EXIST:
                clauses.append(f"NOT ({column} ? {key})")
            case Operator.GREATER_THAN | Operator.LESS_THAN:
                bound = params.add(int(req.values[0]))
                op = ">" if req.operator is Operator.GREATER_THAN else "<"
                clauses.append(
                    f"(CASE WHEN ({column} ->> {key}) ~ '^-?[0-9]+$' "
                    f"THEN ({column} ->> {key})::numeric {op} {bound}::numeric ELSE false END)"
                )
    return clauses


def field_predicate(selector: FieldSelector, params: Params) -> list[str]:
    clauses = []
    for req in selector.requirements:
        column = FIELD_COLUMNS[req.field]
        value = params.add(req.value)
        op = "<>" if req.negated else "="
        clauses.append(f"coalesce({column}, '') {op} {value}")
    return clauses
