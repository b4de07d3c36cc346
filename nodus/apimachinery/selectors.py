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
    parser = _LabelParser(text)
    requirements: list[Requirement] = []
    while not parser.done():
        requirements.append(parser.requirement())
        parser.separator()
    return LabelSelector(tuple(requirements))


class _LabelParser:
    """Reads the tokens of one label selector left to right; ``pos`` is the next token to read. Each method
    reads what it names and moves ``pos`` past it, or raises :class:`SelectorError` quoting the selector."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def done(self) -> bool:
        """True once every token has been read."""
        return self.pos >= len(self.tokens)

    def requirement(self) -> Requirement:
        """One requirement: ``!key``, or a key and the operator and values that follow it. Call only when not
        :meth:`done`."""
        if self.tokens[self.pos] == "!":
            self.pos += 1
            if self.done():
                raise SelectorError(f"expected a key after '!' in {self.text!r}")
            requirement = Requirement(_check_key(self.tokens[self.pos], self.text), Operator.DOES_NOT_EXIST)
            self.pos += 1
            return requirement
        key = _check_key(self.tokens[self.pos], self.text)
        self.pos += 1
        return self._after_key(key)

    def separator(self) -> None:
        """The ``,`` after a requirement, unless it was the last; a ``,`` must be followed by another one."""
        if self.done():
            return
        if self.tokens[self.pos] != ",":
            raise SelectorError(f"expected ',' between requirements in {self.text!r}, found {self.tokens[self.pos]!r}")
        self.pos += 1
        if self.done():
            raise SelectorError(f"trailing ',' in {self.text!r}")

    def _after_key(self, key: str) -> Requirement:
        """The requirement on ``key`` its operator makes; the key alone (before a ``,`` or at the end, the ``,``
        not read) asks that it exists."""
        op = "," if self.done() else self.tokens[self.pos]
        if op == ",":
            return Requirement(key, Operator.EXISTS)
        if op in ("=", "=="):
            self.pos += 1
            return Requirement(key, Operator.EQUALS, (self._value(),))
        if op == "!=":
            self.pos += 1
            return Requirement(key, Operator.NOT_EQUALS, (self._value(),))
        if op in (">", "<"):
            self.pos += 1
            return self._bound(key, op)
        if op in ("in", "notin"):
            self.pos += 1
            return self._set(key, op)
        raise SelectorError(
            f"unexpected {op!r} after key {key!r} in {self.text!r}; "
            "use =, ==, !=, in (...), notin (...), or the key alone"
        )

    def _bound(self, key: str, op: str) -> Requirement:
        """The integer bound after ``>`` or ``<`` (``op``, already read)."""
        bound = self._value()
        if not bound.lstrip("-").isdigit():
            raise SelectorError(f"'{op}' needs an integer value for key {key!r} in {self.text!r}")
        operator = Operator.GREATER_THAN if op == ">" else Operator.LESS_THAN
        return Requirement(key, operator, (bound,))

    def _set(self, key: str, op: str) -> Requirement:
        """The ``(a,b,...)`` after ``in`` or ``notin`` (``op``, already read), its values sorted and without
        repeats."""
        if self.done() or self.tokens[self.pos] != "(":
            raise SelectorError(f"expected '(' after {op!r} in {self.text!r}")
        self.pos += 1
        values: list[str] = []
        while True:
            values.append(self._value())
            if self.done():
                raise SelectorError(f"expected ')' to close the set for key {key!r} in {self.text!r}")
            if self.tokens[self.pos] == ")":
                self.pos += 1
                break
            if self.tokens[self.pos] != ",":
                raise SelectorError(f"expected ',' or ')' in the set for key {key!r} in {self.text!r}")
            self.pos += 1
        operator = Operator.IN if op == "in" else Operator.NOT_IN
        return Requirement(key, operator, tuple(sorted(set(values))))

    def _value(self) -> str:
        """The next token as a label value (checked); '' (the empty value), reading nothing, when the next token
        is punctuation or there is none."""
        if not self.done() and self.tokens[self.pos] not in (",", "(", ")", "=", "==", "!=", "!", ">", "<"):
            value = self.tokens[self.pos]
            self.pos += 1
            return _check_value(value, self.text)
        return ""


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
