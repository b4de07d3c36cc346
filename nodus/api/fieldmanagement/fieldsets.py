"""Field sets: which fields of an object a manager owns, their ordering, and the FieldsV1 wire format.

A :class:`FieldSet` is a set of :data:`Path` values, each a tuple of :class:`PathElement`. An element is one of:

- a field name (``f:replicas`` on the wire, ``.replicas`` in messages);
- the key of an item of a keyed list (``k:{"name":"FOO"}``, ``[name="FOO"]``);
- the value of an item of a set-like list (``v:"foo"``, ``[="foo"]``);
- a list index (``i:0``, ``[0]``), which only appears when decoding sets written by other servers.

A path "is a member" when the field it names is owned as a whole; a path may be a member and also have members below
it (a keyed list item owns itself and its fields). FieldsV1 writes such a node as ``{".": {}, "f:name": {}, ...}``.

Ordering follows structured-merge-diff exactly, because it decides the byte layout of FieldsV1 and the order of paths
in conflict messages: field elements sort before keys, keys before values, values before indices; names compare by
code point (the same order as Go's byte-wise comparison of UTF-8); keys compare field by field; values compare
numbers (ints and floats together) < strings < booleans < lists < maps < null.

Sets are immutable; every operation returns a new set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from nodus.api.fieldmanagement import gojson

# A JSON value in a hashable, totally ordered form: (rank, payload). Ranks follow structured-merge-diff's value order.
ValueKey = tuple[int, Any]

_NUMBER, _STRING, _BOOL, _LIST, _MAP, _NULL = range(6)

FIELD, KEY, VALUE, INDEX = range(4)


class FieldsV1Error(ValueError):
    """A FieldsV1 document that cannot be decoded."""


def value_key(value: Any) -> ValueKey:
    """The hashable, ordered form of a JSON value. Booleans are never equal to numbers; 1 and 1.0 are equal."""
    if isinstance(value, bool):
        return (_BOOL, value)
    if isinstance(value, int | float):
        return (_NUMBER, value)
    if isinstance(value, str):
        return (_STRING, value)
    if isinstance(value, list):
        return (_LIST, tuple(value_key(item) for item in value))
    if isinstance(value, dict):
        return (_MAP, tuple(sorted((name, value_key(item)) for name, item in value.items())))
    if value is None:
        return (_NULL, None)
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def key_value(key: ValueKey) -> Any:
    """The JSON value a :func:`value_key` stands for."""
    rank, payload = key
    if rank == _LIST:
        return [key_value(item) for item in payload]
    if rank == _MAP:
        return {name: key_value(item) for name, item in payload}
    return payload


class PathElement(NamedTuple):
    """One step of a path. Build with :func:`field`, :func:`keyed`, :func:`item_value` or :func:`index`.

    The tuple layout makes Python's tuple ordering equal to structured-merge-diff's ``PathElement.Compare``.
    """

    kind: int
    name: str = ""
    key: tuple[tuple[str, ValueKey], ...] = ()
    value: ValueKey = (_NULL, None)
    position: int = 0

    def wire(self) -> str:
        """The element as a FieldsV1 key: ``f:name``, ``k:{...}``, ``v:...`` or ``i:N``."""
        if self.kind == FIELD:
            return "f:" + self.name
        if self.kind == KEY:
            pairs = ",".join(gojson.json_string(name) + ":" + gojson.dumps(key_value(item)) for name, item in self.key)
            return "k:{" + pairs + "}"
        if self.kind == VALUE:
            return "v:" + gojson.dumps(key_value(self.value))
        return f"i:{self.position}"

    def __str__(self) -> str:
        """The element as structured-merge-diff prints it in messages: ``.name``, ``[k=v]``, ``[=v]``, ``[N]``."""
        if self.kind == FIELD:
            return "." + self.name
        if self.kind == KEY:
            return "[" + ",".join(f"{name}={gojson.value_string(key_value(item))}" for name, item in self.key) + "]"
        if self.kind == VALUE:
            return "[=" + gojson.value_string(key_value(self.value)) + "]"
        return f"[{self.position}]"


Path = tuple[PathElement, ...]


def field(name: str) -> PathElement:
    return PathElement(FIELD, name=name)


def keyed(fields: Mapping[str, Any]) -> PathElement:
    """The element of a keyed list item whose key fields have these values."""
    return PathElement(KEY, key=tuple(sorted((name, value_key(value)) for name, value in fields.items())))


def item_value(value: Any) -> PathElement:
    """The element of a set-like list item with this value."""
    return PathElement(VALUE, value=value_key(value))


def index(position: int) -> PathElement:
    return PathElement(INDEX, position=position)


def path_string(path: Path) -> str:
    """``.spec.env[name="FOO"].value``: the form kube-apiserver uses in conflict messages and status causes."""
    return "".join(str(element) for element in path)


def dotted(*names: str) -> Path:
    """A path of field names only, for readable literals: ``dotted("spec", "image")``."""
    return tuple(field(name) for name in names)


class _Node:
    """A trie node: whether the path ending here is a member, and the nodes below it."""

    __slots__ = ("children", "member")

    def __init__(self) -> None:
        self.member = False
        self.children: dict[PathElement, _Node] = {}


class FieldSet:
    """An immutable set of paths with structured-merge-diff's set algebra and FieldsV1 encoding."""

    __slots__ = ("_paths", "_trie")

    def __init__(self, paths: Iterable[Path] = ()) -> None:
        self._paths = frozenset(path for path in paths if path)
        self._trie: _Node | None = None

    # Set algebra -------------------------------------------------------------------------------------------------

    def __or__(self, other: FieldSet) -> FieldSet:
        return FieldSet(self._paths | other._paths)

    def __and__(self, other: FieldSet) -> FieldSet:
        return FieldSet(self._paths & other._paths)

    def __sub__(self, other: FieldSet) -> FieldSet:
        return FieldSet(self._paths - other._paths)

    def __contains__(self, path: object) -> bool:
        return path in self._paths

    def __bool__(self) -> bool:
        return bool(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldSet) and other._paths == self._paths

    def __hash__(self) -> int:
        return hash(self._paths)

    def __iter__(self) -> Iterator[Path]:
        """Paths in structured-merge-diff's iteration order (see :meth:`ordered`)."""
        return iter(self.ordered())

    def __repr__(self) -> str:
        return "FieldSet([" + ", ".join(repr(path_string(path)) for path in self.ordered()) + "])"

    def keep(self, predicate: Callable[[Path], bool]) -> FieldSet:
        return FieldSet(path for path in self._paths if predicate(path))

    def recursive_difference(self, other: FieldSet) -> FieldSet:
        """This set without the paths of ``other`` and without every path below one of them."""
        return self.keep(lambda path: not any(path[:length] in other._paths for length in range(1, len(path) + 1)))

    def children_of(self, element: PathElement) -> FieldSet:
        """The paths below ``element`` (relative to it); ``(element,)`` itself is not included."""
        return FieldSet(path[1:] for path in self._paths if len(path) > 1 and path[0] == element)

    def has_children(self, element: PathElement) -> bool:
        return any(len(path) > 1 and path[0] == element for path in self._paths)

    def with_named_parents(self) -> FieldSet:
        """structured-merge-diff's ``EnsureNamedFieldsAreMembers``: every field that contains a member is a member.

        Pruning uses it so that a struct whose last owned field goes away can go away too. Every JSON object key is
        treated as a declared field (Nodus kinds declare their properties), so every field prefix qualifies; list
        item keys and values do not.
        """
        paths = set(self._paths)
        for path in self._paths:
            for length in range(1, len(path)):
                if path[length - 1].kind == FIELD:
                    paths.add(path[:length])
        return FieldSet(paths)

    # Ordering and encoding ---------------------------------------------------------------------------------------

    def _root(self) -> _Node:
        if self._trie is None:
            root = _Node()
            for path in self._paths:
                node = root
                for element in path:
                    node = node.children.setdefault(element, _Node())
                node.member = True
            self._trie = root
        return self._trie

    def ordered(self) -> list[Path]:
        """Paths in structured-merge-diff's ``Set.Iterate`` order: at each level the members, sorted, then the
        descendants of each child, sorted. kube-apiserver lists conflicting fields in this order."""
        out: list[Path] = []

        def visit(node: _Node, prefix: Path) -> None:
            elements = sorted(node.children)
            out.extend((*prefix, element) for element in elements if node.children[element].member)
            for element in elements:
                if node.children[element].children:
                    visit(node.children[element], (*prefix, element))

        visit(self._root(), ())
        return out

    def to_fields_v1(self) -> dict[str, Any]:
        """The FieldsV1 document of this set, with keys in the order kube-apiserver writes them."""

        def encode(node: _Node, include_self: bool) -> dict[str, Any]:
            out: dict[str, Any] = {}
            if include_self and node.children:
                out["."] = {}
            for element in sorted(node.children):
                child = node.children[element]
                out[element.wire()] = encode(child, child.member) if child.children else {}
            return out

        return encode(self._root(), False)

    @classmethod
    def from_fields_v1(cls, document: object) -> FieldSet:
        """Decode a FieldsV1 document as structured-merge-diff does: ``"."`` marks the enclosing path as a member,
        an empty object marks a leaf member, elements of an unknown kind are ignored, malformed ones are errors."""
        paths: list[Path] = []

        def decode(node: object, prefix: Path) -> bool:
            """Collect the paths below ``prefix``; return whether ``prefix`` itself is a member."""
            if not isinstance(node, dict):
                raise FieldsV1Error(f"expected an object at {path_string(prefix) or 'the root'}")
            member = False
            has_children = False
            for wire_key, child in node.items():
                if wire_key == ".":
                    member = True
                    continue
                element = _parse_element(wire_key)
                if element is None:
                    continue
                has_children = True
                if decode(child, (*prefix, element)):
                    paths.append((*prefix, element))
            return member or not has_children

        decode(document, ())
        return cls(paths)


_INDEX_PATTERN = re.compile(r"[+-]?[0-9]+")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_element(wire_key: str) -> PathElement | None:
    """One FieldsV1 key; None for a well-formed key of a kind this server does not know (ignored, as upstream)."""
    if len(wire_key) < 2:
        raise FieldsV1Error(f"key must be 2 characters long: {wire_key!r}")
    if wire_key[1] != ":":
        raise FieldsV1Error(f"missing colon: {wire_key!r}")
    kind, body = wire_key[0], wire_key[2:]
    if kind == "f":
        return field(body)
    if kind == "i":
        if not _INDEX_PATTERN.fullmatch(body):
            raise FieldsV1Error(f"invalid index: {wire_key!r}")
        return index(int(body))
    if kind not in ("k", "v"):
        return None
    try:
        parsed = json.loads(body, parse_constant=_refuse_constant)
    except ValueError as error:
        raise FieldsV1Error(f"invalid JSON in {wire_key!r}: {error}") from error
    if kind == "v":
        return item_value(parsed)
    if not isinstance(parsed, dict):
        raise FieldsV1Error(f"expected key value pairs in {wire_key!r}")
    return keyed(parsed)
