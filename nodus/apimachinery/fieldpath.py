"""Field paths and field errors, the currency of validation.

Validators return a list of :class:`FieldError` built with :class:`Path`
(``Path("spec").child("recovery").child("checkpoint").child("interval")``), so that every error of one
request can be reported together, each naming its field, in ``details.causes`` of a 422 Status.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Path:
    """An immutable JSON field path such as ``spec.env[2].name`` or ``metadata.labels[app]``."""

    __slots__ = ("_text",)

    def __init__(self, *segments: str) -> None:
        self._text = ".".join(segments)

    @classmethod
    def _of(cls, text: str) -> Path:
        path = cls.__new__(cls)
        path._text = text
        return path

    def child(self, name: str, *more: str) -> Path:
        text = f"{self._text}.{name}" if self._text else name
        for extra in more:
            text = f"{text}.{extra}"
        return Path._of(text)

    def index(self, i: int) -> Path:
        return Path._of(f"{self._text}[{i}]")

    def key(self, k: str) -> Path:
        return Path._of(f"{self._text}[{k}]")

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Path({self._text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Path) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)


class ErrorType(str, Enum):
    """The Kubernetes ``StatusCause.reason`` values a field error can carry."""

    REQUIRED = "FieldValueRequired"
    INVALID = "FieldValueInvalid"
    NOT_SUPPORTED = "FieldValueNotSupported"
    DUPLICATE = "FieldValueDuplicate"
    FORBIDDEN = "FieldValueForbidden"
    TOO_LONG = "FieldValueTooLong"
    TOO_MANY = "FieldValueTooMany"
    TYPE_INVALID = "FieldValueTypeInvalid"
    UNKNOWN = "FieldValueUnknown"


@dataclass(frozen=True)
class FieldError:
    """One problem with one field: what is wrong and, in ``detail``, how to fix it."""

    type: ErrorType
    field: str
    detail: str
    value: Any = None

    def message(self) -> str:
        """The cause message in the form kube-apiserver uses: ``<field>: <what>: <detail>``."""
        what = {
            ErrorType.REQUIRED: "Required value",
            ErrorType.INVALID: "Invalid value",
            ErrorType.NOT_SUPPORTED: "Unsupported value",
            ErrorType.DUPLICATE: "Duplicate value",
            ErrorType.FORBIDDEN: "Forbidden",
            ErrorType.TOO_LONG: "Too long",
            ErrorType.TOO_MANY: "Too many",
            ErrorType.TYPE_INVALID: "Invalid value",
            ErrorType.UNKNOWN: "Unknown field",
        }[self.type]
        if self.type in (ErrorType.INVALID, ErrorType.NOT_SUPPORTED, ErrorType.DUPLICATE) and (self.value is not None):
            what = f"{what}: {_render(self.value)}"
        return f"{what}: {self.detail}" if self.detail else what


def _render(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if not isinstance(value, int | float) else str(value)


def required(path: Path, detail: str = "") -> FieldError:
    return FieldError(ErrorType.REQUIRED, str(path), detail)


def invalid(path: Path, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.INVALID, str(path), detail, value)


def not_supported(path: Path, value: Any, allowed: list[str] | tuple[str, ...]) -> FieldError:
    quoted = ", ".join(f'"{v}"' for v in allowed)
    return FieldError(ErrorType.NOT_SUPPORTED, str(path), f"supported values: {quoted}", value)


def duplicate(path: Path, value: Any) -> FieldError:
    return FieldError(ErrorType.DUPLICATE, str(path), "must be unique", value)


def forbidden(path: Path, detail: str) -> FieldError:
    return FieldError(ErrorType.FORBIDDEN, str(path), detail)


def too_many(path: Path, actual: int, limit: int) -> FieldError:
    return FieldError(ErrorType.TOO_MANY, str(path), f"has {actual} items, must have at most {limit}", actual)


def too_long(path: Path, limit: int) -> FieldError:
    return FieldError(ErrorType.TOO_LONG, str(path), f"may not be more than {limit} characters")
