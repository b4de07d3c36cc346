"""Typed models for kinds: pydantic v2 conventions and the translation of its errors into field errors.

A kind's spec and status are pydantic models with camelCase aliases, descriptions taken from the
reference (they become the OpenAPI descriptions ``kubectl explain`` shows), and single-field
constraints (types, enums, ranges, patterns, list lengths) declared on the fields. Cross-field rules
live in the kind's strategy. :func:`validate_model` runs a model over a JSON value and returns every
error as a :class:`FieldError` whose field is the full JSON path (``spec.env[2].name``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path

M = TypeVar("M", bound=BaseModel)


def _path(base: Path, loc: tuple[int | str, ...]) -> Path:
    path = base
    for part in loc:
        if isinstance(part, int):
            path = path.index(part)
        elif part.startswith(("function-", "tagged-union[")) or part in ("list[str]", "str", "int"):
            continue  # pydantic's names for union members: not part of the JSON path
        else:
            path = path.child(part)
    return path


_TYPE_NAMES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "string_type": "a string",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "float_type": "a number",
}


def field_errors(error: ValidationError, base: Path) -> list[FieldError]:
    """Translate a pydantic ValidationError into field errors under ``base``."""
    out: list[FieldError] = []
    for item in error.errors(include_url=False):
        path = _path(base, tuple(item["loc"]))
        kind = item["type"]
        value = item.get("input")
        ctx = item.get("ctx") or {}
        if kind == "missing":
            out.append(fieldpath.required(path))
        elif kind == "extra_forbidden":
            out.append(FieldError(fieldpath.ErrorType.UNKNOWN, str(path), "this field is not part of the schema"))
        elif kind in _TYPE_NAMES:
            out.append(FieldError(fieldpath.ErrorType.TYPE_INVALID, str(path), f"must be {_TYPE_NAMES[kind]}", value))
        elif kind in ("literal_error", "enum"):
            expected = ctx.get("expected", "")
            allowed = [v.strip().strip("'\"") for v in expected.replace(" or ", ",").split(",") if v.strip()]
            out.append(fieldpath.not_supported(path, value, allowed))
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            words = {
                "greater_than_equal": "greater than or equal to",
                "greater_than": "greater than",
                "less_than_equal": "less than or equal to",
                "less_than": "less than",
            }[kind]
            bound = next(iter(ctx.values()), "")
            out.append(fieldpath.invalid(path, value, f"must be {words} {bound}"))
        elif kind == "string_pattern_mismatch":
            out.append(fieldpath.invalid(path, value, f"must match the regular expression '{ctx.get('pattern')}'"))
        elif kind == "too_long":
            limit = ctx.get("max_length")
            actual = ctx.get("actual_length")
            if isinstance(value, str):
                out.append(fieldpath.too_long(path, int(limit or 0)))
            else:
                out.append(fieldpath.too_many(path, int(actual or 0), int(limit or 0)))
        elif kind == "too_short":
            out.append(fieldpath.invalid(path, value, f"must have at least {ctx.get('min_length')} items"))
        else:
            message = str(item.get("msg", "is invalid"))
            if message.startswith("Value error, "):
                message = message[len("Value error, ") :]
            out.append(fieldpath.invalid(path, value if not isinstance(value, dict | list) else None, message))
    return out


def validate_model(model: type[M], data: Any, base: Path) -> tuple[M | None, list[FieldError]]:
    """Validate ``data`` against ``model``; returns the instance (or None) and every error."""
    try:
        return model.model_validate(data, strict=True), []
    except ValidationError as error:
        return None, field_errors(error, base)
