"""Label and field selectors, parsed once and matched in memory or translated to SQL by storage.

The grammar is Kubernetes': a comma-separated list of requirements that must all hold.
Labels: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``, ``k>1``, ``k<1``.
Fields: ``f=v``, ``f==v``, ``f!=v`` over a fixed set of fields each kind declares.
A ``!=`` or ``notin`` requirement also matches an object that lacks the key, as in Kubernetes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY_RE = re.compile(rf"^({_PREFIX}/)?{_NAME}$")
_VALUE_RE = re.compile(rf"^({_NAME})?$")


class SelectorError(ValueError):
    """A selector string that does not parse; the message says where and why."""


class Operator(str, Enum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case Operator.EQUALS | Operator.IN:
                return present and value in self.values
            case Operator.NOT_EQUALS | Operator.NOT_IN:
                return not present or value not in self.values
            case Operator.EXISTS:
                return present
            case Operator.DOES_NOT_EXIST:
                return not present
            case Operator.GREATER_THAN | Operator.LESS_THAN:
                if not present or value is None:
                    return False
                try:
                    number, bound = int(value), int(self.values[0])
                except ValueError:
                    return False
                return number > bound if self.operator is Operator.GREATER_THAN else number < bound
        return False  # pragma: no cover - exhaustive match


@dataclass(frozen=True)
class LabelSelector:
    """All requirements must hold. The empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        parts = []
        for r in self.requirements:
            if r.operator in (Operator.IN, Operator.NOT_IN):
                parts.append(f"{r.key} {r.operator.value} ({','.join(r.values)})")
            elif r.operator is Operator.EXISTS:
                parts.append(r.key)
            elif r.operator is Operator.DOES_NOT_EXIST:
                parts.append(f"!{r.key}")
            elif r.operator is Operator.GREATER_THAN:
                parts.append(f"{r.key}>{r.values[0]}")
            elif r.operator is Operator.LESS_THAN:
                parts.append(f"{r.key}<{r.values[0]}")
            else:
                parts.append(f"{r.key}{r.operator.value}{r.values[0]}")
        return ",".join(parts)


_TOKEN_RE = re.compile(r"\s*(!=|==|=|>|<|\(|\)|,|!|[^\s!=<>(),]+)")


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN_RE.match(text, pos)
        if match is None:  # pragma: no cover - the pattern accepts any non-space character
            raise SelectorError(f"unexpected character at {pos} in {text!r}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def _check_key(key: str, text: str) -> str:
    if not _KEY_RE.match(key) or len(key) > 316:
        raise SelectorError(
            f"invalid label key {key!r} in {text!r}: a key is an optional DNS prefix and '/', then a name of "
            "at most 63 characters of [A-Za-z0-9-_.] that starts and ends with an alphanumeric character"
        )
    return key


def _check_value(value: str, text: str) -> str:
    if not _VALUE_RE.match(value):
        raise SelectorError(
            f"invalid label value {value!r} in {text!r}: a value is at most 63 characters of "
            "[A-Za-z0-9-_.] that starts and ends with an alphanumeric character"
        )
    return value


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query value. Raises :class:`SelectorError` with a readable message."""
    if text is None or text.strip() == "":
        return LabelSelector()
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    i = 0

    def expect_value() -> str:
        nonlocal i
        if i < len(tokens) and tokens[i] not in (",", "(", ")", "=", "==", "!=", "!", ">", "<"):
            value = tokens[i]
            i += 1
            return _check_value(value, text)
        return ""

    while i < len(tokens):
        token = tokens[i]
        if token == "!":
            i += 1
            if i >= len(tokens):
                raise SelectorError(f"expected a key after '!' in {text!r}")
            requirements.append(Requirement(_check_key(tokens[i], text), Operator.DOES_NOT_EXIST))
            i += 1
        else:
            key = _check_key(token, text)
            i += 1
            op = tokens[i] if i < len(tokens) else ","
            if op == ",":
                requirements.append(Requirement(key, Operator.EXISTS))
            elif op in ("=", "=="):
                i += 1
                requirements.append(Requirement(key, Operator.EQUALS, (expect_value(),)))
            elif op == "!=":
                i += 1
                requirements.append(Requirement(key, Operator.NOT_EQUALS, (expect_value(),)))
            elif op in (">", "<"):
                i += 1
                bound = expect_value()
                if not bound.lstrip("-").isdigit():
                    raise SelectorError(f"'{op}' needs an integer value for key {key!r} in {text!r}")
                operator = Operator.GREATER_THAN if op == ">" else Operator.LESS_THAN
                requirements.append(Requirement(key, operator, (bound,)))
            elif op in ("in", "notin"):
                i += 1
                if i >= len(tokens) or tokens[i] != "(":
                    raise SelectorError(f"expected '(' after {op!r} in {text!r}")
                i += 1
                values: list[str] = []
                while True:
                    values.append(expect_value())
                    if i >= len(tokens):
                        raise SelectorError(f"expected ')' to close the set for key {key!r} in {text!r}")
                    if tokens[i] == ")":
                        i += 1
                        break
                    if tokens[i] != ",":
                        raise SelectorError(f"expected ',' or ')' in the set for key {key!r} in {text!r}")
                    i += 1
                operator = Operator.IN if op == "in" else Operator.NOT_IN
                requirements.append(Requirement(key, operator, tuple(sorted(set(values)))))
            else:
                raise SelectorError(
                    f"unexpected {op!r} after key {key!r} in {text!r}; "
                    "use =, ==, !=, in (...), notin (...), or the key alone"
                )
        if i < len(tokens):
            if tokens[i] != ",":
                raise SelectorError(f"expected ',' between requirements in {text!r}, found {tokens[i]!r}")
            i += 1
            if i >= len(tokens):
                raise SelectorError(f"trailing ',' in {text!r}")
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    negated: bool = False

    def matches(self, fields: Mapping[str, str | None]) -> bool:
        actual = fields.get(self.field)
        equal = (actual or "") == self.value
        return not equal if self.negated else equal


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, fields: Mapping[str, str | None]) -> bool:
        return all(r.matches(fields) for r in self.requirements)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_field_selector(text: str | None, supported: Iterable[str]) -> FieldSelector:
    """Parse a ``fieldSelector``; only the fields in ``supported`` may be named."""
    if text is None or text.strip() == "":
        return FieldSelector()
    allowed = tuple(supported)
    requirements = []
    for raw in _split_unescaped(text, ","):
        term = raw.strip()
        match = re.match(r"^([^!=]+?)\s*(!=|==|=)\s*(.*)$", term)
        if match is None:
            raise SelectorError(f"invalid field selector term {term!r}: use field=value or field!=value")
        field, op, value = match.group(1).strip(), match.group(2), match.group(3).strip()
        negated = op == "!="
        if field not in allowed:
            raise SelectorError(f"field label not supported: {field} (supported: {', '.join(sorted(allowed))})")
        requirements.append(FieldRequirement(field, value, negated))
    return FieldSelector(tuple(requirements))
