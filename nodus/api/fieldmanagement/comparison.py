"""Reading objects as field sets: the fields an object sets, and what changed between two objects.

Both walks follow structured-merge-diff (``typed.ToFieldSet`` and ``typed.Compare``) over plain JSON, with the list
types of :class:`~nodus.api.fieldmanagement.schema.ListTypes`:

- :func:`field_set` is what an applier owns for a configuration: every scalar and atomic list, every keyed-list item
  (as a member, plus its fields), every set item. A JSON object contributes only its fields; an empty object or an
  empty associative list contributes nothing.
- :func:`compare` is what an update changed: leaves that were added, modified or removed, plus every object, keyed
  item or associative list that appeared (added) or disappeared (removed) as a whole. This is why an Update entry
  shows ``".": {}`` under an object it created while an Apply entry does not.

JSON ``null`` follows the schema type of its field: null is a leaf for a scalar or an atomic list, and means "empty"
for an object or an associative list.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nodus.api.fieldmanagement.fieldsets import FIELD, INDEX, FieldSet, Path, PathElement, field
from nodus.api.fieldmanagement.schema import UNTRACKED, ListTypes, Scope


class _Missing:
    """The absence of a value, distinct from JSON null."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def json_equal(left: Any, right: Any) -> bool:
    """structured-merge-diff's value equality: numbers compare numerically (1 == 1.0), booleans are not numbers."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) or isinstance(right, int | float):
        return isinstance(left, int | float) and isinstance(right, int | float) and left == right
    if isinstance(left, dict):
        return (
            isinstance(right, dict)
            and left.keys() == right.keys()
            and all(json_equal(item, right[key]) for key, item in left.items())
        )
    if isinstance(left, list):
        return (
            isinstance(right, list)
            and len(left) == len(right)
            and all(json_equal(a, b) for a, b in zip(left, right, strict=True))
        )
    return type(left) is type(right) and bool(left == right)


def shape(left: Any, right: Any) -> str:
    """How a pair of values (either may be MISSING or null) is walked: as a ``map``, a ``list`` or a ``leaf``.

    Null and absence take the shape of the other side; two values of different shapes are compared as leaves.
    """
    kinds = {type(value) for value in (left, right) if value is not MISSING and value is not None}
    if kinds == {dict}:
        return "map"
    if kinds == {list}:
        return "list"
    return "leaf"


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def first_by_element(indexed: Iterable[tuple[PathElement, Any]]) -> dict[PathElement, Any]:
    """The first item for each element (later duplicates are ignored, as structured-merge-diff does for stored data)."""
    found: dict[PathElement, Any] = {}
    for element, item in indexed:
        found.setdefault(element, item)
    return found


def field_set(value: dict[str, Any], types: ListTypes, *, strict: bool = False, hint: Any = MISSING) -> FieldSet:
    """The fields ``value`` sets (structured-merge-diff's ``ToFieldSet``).

    ``strict`` refuses duplicate keys in associative lists (applied configurations). ``hint`` is the object the
    configuration is merged into: it tells whether a null in the configuration stands for an object (owns nothing,
    as upstream) or for a scalar (owns the field), since this layer has no schema types.
    """
    paths: list[Path] = []

    def walk(node: Any, path: Path) -> None:
        if isinstance(node, dict):
            for name, child in node.items():
                walk(child, (*path, field(name)))
            return
        keys = types.keys_at(path)
        if isinstance(node, list) and keys is not None:
            for element, item in types.index_items(keys, node, path, strict=strict):
                walk(item, (*path, element))
                paths.append((*path, element))
            return
        if node is None and (keys is not None or isinstance(value_at(hint, path, types), dict)):
            return
        paths.append(path)

    walk(value, ())
    return FieldSet(paths)


@dataclass(frozen=True)
class Comparison:
    """What changed between two objects, as three disjoint field sets."""

    added: FieldSet
    modified: FieldSet
    removed: FieldSet

    @property
    def changed(self) -> FieldSet:
        """Fields set by the newer object that the older one did not have or had with another value."""
        return self.added | self.modified

    def restrict(self, scope: Scope) -> Comparison:
        return Comparison(scope.restrict(self.added), scope.restrict(self.modified), scope.restrict(self.removed))


def compare(old: dict[str, Any], new: dict[str, Any], types: ListTypes) -> Comparison:
    """The fields added, modified and removed from ``old`` to ``new`` (structured-merge-diff's ``Compare``)."""
    added: list[Path] = []
    modified: list[Path] = []
    removed: list[Path] = []

    def walk(before: Any, after: Any, path: Path) -> None:
        kind, keys = shape(before, after), types.keys_at(path)
        if kind == "map" and (as_dict(before) or as_dict(after)):
            left, right = as_dict(before), as_dict(after)
            for name in [*left, *(name for name in right if name not in left)]:
                walk(left.get(name, MISSING), right.get(name, MISSING), (*path, field(name)))
        elif kind == "list" and keys is not None and (as_list(before) or as_list(after)):
            left_items = first_by_element(types.index_items(keys, as_list(before), path, strict=False))
            right_items = first_by_element(types.index_items(keys, as_list(after), path, strict=False))
            for element in [*left_items, *(element for element in right_items if element not in left_items)]:
                walk(left_items.get(element, MISSING), right_items.get(element, MISSING), (*path, element))
        else:
            # A leaf: a scalar, an atomic list, or an object/associative list empty on both sides.
            if before is MISSING:
                added.append(path)
            elif after is MISSING:
                removed.append(path)
            elif not json_equal(before, after):
                modified.append(path)
            return
        # An object, keyed item or associative list that appeared or disappeared as a whole.
        if path and before is MISSING:
            added.append(path)
        elif path and after is MISSING:
            removed.append(path)

    walk(old, new, ())
    return Comparison(FieldSet(added), FieldSet(modified), FieldSet(removed))


def created_fields_v1(new: dict[str, Any], types: ListTypes, scope: Scope) -> dict[str, Any] | None:
    """The FieldsV1 document of what a create owns: the paths ``compare({}, new)`` adds, within ``scope``, without
    :data:`UNTRACKED`, exactly as ``FieldSet.to_fields_v1`` encodes them; None when that is nothing.

    One walk that writes the document as it goes, because creates are the write path's hot path: the general route
    (a Comparison, two FieldSets, a trie, then the encoding) cost a quarter of a create's CPU. A keyed item without
    its key raises :class:`~nodus.api.fieldmanagement.schema.StructureError`, as :func:`compare` does.
    """

    def encode(value: Any, path: Path, owned: bool) -> dict[str, Any] | None:
        """The document of what lies at and below ``path`` (None: nothing). As :func:`compare` walks an added
        value: a non-empty object and a non-empty keyed list are walked, and every value met is added, itself
        included, since it appeared as a whole. A subtree the scope does not own is walked too (its keyed lists
        can be malformed, which refuses the whole record as :func:`compare` does) but records nothing."""
        children: list[tuple[PathElement, dict[str, Any]]] = []
        keys = types.keys_at(path) if isinstance(value, list) and value else None
        if isinstance(value, dict):
            items: Iterable[tuple[PathElement, Any]] = ((field(name), child) for name, child in value.items())
        elif keys is not None:
            items = first_by_element(types.index_items(keys, value, path, strict=False)).items()
        else:
            items = ()
        for element, item in items:
            below = (*path, element)
            # Scope is decided by the top-level field.
            encoded = encode(item, below, owned and (len(below) > 1 or scope.owns(below)))
            if encoded is not None:
                children.append((element, encoded))
        member = owned and bool(path) and path not in UNTRACKED
        if not children:
            return {} if member else None
        document: dict[str, Any] = {".": {}} if member else {}
        for element, encoded in sorted(children, key=lambda child: child[0]):
            document[element.wire()] = encoded
        return document

    return encode(new, (), True)


def value_at(obj: Any, path: Path, types: ListTypes) -> Any:
    """The value at ``path`` in ``obj``, or MISSING."""
    node = obj
    for depth, element in enumerate(path):
        if element.kind == FIELD:
            if not isinstance(node, dict) or element.name not in node:
                return MISSING
            node = node[element.name]
        elif element.kind == INDEX:
            if not isinstance(node, list) or not 0 <= element.position < len(node):
                return MISSING
            node = node[element.position]
        else:
            keys = types.keys_at(path[:depth])
            if not isinstance(node, list) or keys is None:
                return MISSING
            items = first_by_element(types.index_items(keys, node, path[:depth], strict=False))
            if element not in items:
                return MISSING
            node = items[element]
    return node
