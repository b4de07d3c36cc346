"""The string formats of the Job API, each checked on write and declared for OpenAPI.

Durations (``15m``), quantities (``1Ti``), decimal USD amounts (``12.50``), RFC 3339 times and
patterned names are all JSON strings. Each format here is an annotation marker: it runs after
pydantic's own string check, raises ``ValueError`` with a message that says how to write a valid
value (``validate_model`` turns it into a ``FieldValueInvalid`` naming the field), and adds its
``format`` or ``pattern`` to the field's JSON schema. Values are never rewritten: the stored spec
keeps what the user wrote, and consumers parse it with ``nodus.apimachinery.units``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from nodus.apimachinery import units


class StringFormat:
    """Base of the markers: ``check`` raises ValueError for a bad value; ``schema`` is merged into the JSON schema."""

    def check(self, value: str) -> None:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        return {}

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        def validate(value: str) -> str:
            self.check(value)
            return value

        return core_schema.no_info_after_validator_function(validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        result = handler(schema)
        result.update(self.schema())
        return result


@dataclass(frozen=True)
class Matches(StringFormat):
    """A string matching ``regex``; ``hint`` says in words what a valid value looks like."""

    regex: str
    hint: str

    def check(self, value: str) -> None:
        if re.fullmatch(self.regex, value) is None:
            raise ValueError(f"{self.hint} (regular expression {self.regex})")

    def schema(self) -> dict[str, Any]:
        return {"pattern": self.regex}


@dataclass(frozen=True)
class PathFormat(StringFormat):
    """An absolute, normalised path inside the container (ADR 0031): see :func:`path_problem`."""

    def check(self, value: str) -> None:
        if (problem := path_problem(value)) is not None:
            raise ValueError(problem)

    def schema(self) -> dict[str, Any]:
        return {"pattern": PATH_PATTERN}


PATH_PATTERN = r"^/$|^(/(?!\.\.?(/|$))[^/\x00]+)+$"


def path_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a path inside the container, with the fix; None when it is fine.

    A path is ``/`` or ``/`` followed by components separated by single slashes, none of them ``.`` or ``..``,
    with no trailing slash and no NUL. The agent resolves such a path one component at a time below the host
    directory behind its mount; a path that would mean something else once normalised is refused, never
    rewritten, so what the Job says is what the agent reads and writes."""
    if not value.startswith("/"):
        return "must be an absolute path, starting with / (such as /nodus/outputs/model)"
    if "\0" in value:
        return "must not contain a NUL character"
    if value == "/":
        return None
    parts = value[1:].split("/")
    if parts[-1] == "":
        return f"must not end with /; write {value.rstrip('/') or '/'}"
    if "" in parts:
        return "must not contain an empty component (//); separate components with one /"
    if "." in parts or ".." in parts:
        return "must not contain a . or .. component; name the path directly from / (such as /nodus/outputs/model)"
    return None


@dataclass(frozen=True)
class DurationFormat(StringFormat):
    """A Go duration (``90s``, ``15m``, ``1h30m``), optionally bounded; bounds are written as durations too."""

    minimum: str | None = None
    maximum: str | None = None
    positive: bool = False

    def check(self, value: str) -> None:
        duration = units.parse_duration(value)
        too_short = self.minimum is not None and duration < units.parse_duration(self.minimum)
        too_long = self.maximum is not None and duration > units.parse_duration(self.maximum)
        if too_short or too_long:
            raise ValueError(self._range())
        if self.positive and not duration:
            raise ValueError("must be longer than 0s")

    def _range(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"must be between {self.minimum} and {self.maximum}"
        if self.minimum is not None:
            return f"must be at least {self.minimum}"
        return f"must be at most {self.maximum}"

    def schema(self) -> dict[str, Any]:
        return {"format": "duration"}


@dataclass(frozen=True)
class AutoOrDuration(StringFormat):
    """The literal ``auto`` (lower case, ADR 0046 §24) or a Go duration within bounds."""

    minimum: str
    maximum: str

    def check(self, value: str) -> None:
        if value == "auto":
            return
        try:
            DurationFormat(self.minimum, self.maximum).check(value)
        except ValueError as exc:
            raise ValueError(f"must be auto or a duration from {self.minimum} to {self.maximum}, such as 30m") from exc


@dataclass(frozen=True)
class QuantityFormat(StringFormat):
    """A Kubernetes quantity (``500m``, ``16Gi``, ``1Ti``), never negative, optionally capped."""

    maximum: str | None = None

    def check(self, value: str) -> None:
        amount = units.parse_quantity(value)
        if amount < 0:
            raise ValueError("must not be negative")
        if self.maximum is not None and amount > units.parse_quantity(self.maximum):
            raise ValueError(f"must be at most {self.maximum}")

    def schema(self) -> dict[str, Any]:
        return {"format": "quantity"}


@dataclass(frozen=True)
class UsdFormat(StringFormat):
    """A decimal USD string with at most 6 fractional digits (ADR 0046 §22), never a float."""

    positive: bool = False

    def check(self, value: str) -> None:
        amount = units.parse_usd(value)
        if self.positive and not amount:
            raise ValueError('must be greater than 0, for example "25" or "12.50"')

    def schema(self) -> dict[str, Any]:
        return {"format": "decimal"}


@dataclass(frozen=True)
class DecimalFormat(StringFormat):
    """A finite decimal number written as a string (``0.0231``, ``-1.5``, ``1e-5``), for measurements."""

    def check(self, value: str) -> None:
        try:
            number = Decimal(value)
        except InvalidOperation as exc:
            raise ValueError("must be a decimal number written as a string, such as 0.25 or 1e-5") from exc
        if not number.is_finite():
            raise ValueError("must be a finite decimal number")

    def schema(self) -> dict[str, Any]:
        return {"format": "decimal"}


@dataclass(frozen=True)
class TimeFormat(StringFormat):
    """An RFC 3339 time with a zone, such as ``2026-11-29T12:00:00Z``."""

    def check(self, value: str) -> None:
        units.parse_time(value)

    def schema(self) -> dict[str, Any]:
        return {"format": "date-time"}


Duration = Annotated[str, DurationFormat()]
PositiveDuration = Annotated[str, DurationFormat(positive=True)]
Time = Annotated[str, TimeFormat()]
Usd = Annotated[str, UsdFormat()]
PositiveUsd = Annotated[str, UsdFormat(positive=True)]
Quantity = Annotated[str, QuantityFormat()]
DecimalString = Annotated[str, DecimalFormat()]
Sha256Hex = Annotated[str, Matches(r"^[0-9a-f]{64}$", "must be a SHA-256 digest: 64 lowercase hexadecimal characters")]
AbsolutePath = Annotated[str, PathFormat()]
EnvName = Annotated[
    str,
    Matches(r"^[A-Za-z_][A-Za-z0-9_]*$", "must start with a letter or _ and contain only letters, digits and _"),
]
