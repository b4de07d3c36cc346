"""What field management knows of a kind's structure, and which fields it never tracks.

Nodus has no structural schema at this layer; it needs only three facts, all as kube-apiserver derives them from a
CRD's OpenAPI schema:

- which lists merge by key (``x-kubernetes-list-type: map``) and which are sets (``x-kubernetes-list-type: set``);
  every other list is atomic. :class:`ListTypes` answers this from the kind's ``ListKeys`` (an empty key tuple
  declares a set), plus ObjectMeta's own lists (``finalizers`` is a set, ``ownerReferences`` is keyed by ``uid``);
- every JSON object is a struct whose keys are declared fields (maps are granular, one field per key);
- which fields are never tracked (:data:`UNTRACKED`) and which top-level fields a subresource does not own
  (:class:`Scope`).

Structural problems (a keyed list item without its key, a duplicate key in an applied list) raise
:class:`StructureError`, whose text matches structured-merge-diff's (``.spec.env: duplicate entries for key
[name="A"]``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from nodus.api.fieldmanagement.fieldsets import (
    FIELD,
    FieldSet,
    Path,
    PathElement,
    dotted,
    item_value,
    keyed,
    path_string,
)

ListKeys = Mapping[str, tuple[str, ...]]

# ObjectMeta's associative lists, as kube-apiserver's ObjectMeta schema declares them.
OBJECT_META_LIST_TYPES: dict[str, tuple[str, ...]] = {
    "metadata.finalizers": (),
    "metadata.ownerReferences": ("uid",),
}

# kube-apiserver's stripMeta set plus the deletion fields, which kube-apiserver never reaches through the field
# manager and which a Nodus write must not claim either. These are exact paths: `metadata` itself is stripped (so
# a creation never shows `.` under f:metadata) while the fields below it stay tracked.
UNTRACKED = FieldSet(
    [
        dotted("apiVersion"),
        dotted("kind"),
        dotted("metadata"),
        dotted("metadata", "name"),
        dotted("metadata", "namespace"),
        dotted("metadata", "uid"),
        dotted("metadata", "resourceVersion"),
        dotted("metadata", "generation"),
        dotted("metadata", "creationTimestamp"),
        dotted("metadata", "managedFields"),
        dotted("metadata", "selfLink"),
        dotted("metadata", "clusterName"),
        dotted("metadata", "deletionTimestamp"),
        dotted("metadata", "deletionGracePeriodSeconds"),
    ]
)


class StructureError(ValueError):
    """An object whose lists do not fit their declared list type."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path_string(path)}: {message}")
        self.path = path


class ListTypes:
    """The list types of one kind, looked up by dotted field path with list items omitted (``spec.sidecars.env``)."""

    __slots__ = ("_keys",)

    def __init__(self, list_keys: ListKeys) -> None:
        self._keys = {**OBJECT_META_LIST_TYPES, **list_keys}

    def keys_of(self, schema_path: str) -> tuple[str, ...] | None:
        """The key fields of a keyed list, ``()`` for a set, None for an atomic list."""
        return self._keys.get(schema_path)

    def keys_at(self, path: Path) -> tuple[str, ...] | None:
        """:meth:`keys_of` for the list at ``path``."""
        return self._keys.get(schema_path_of(path)) if path else None

    def item_element(self, keys: tuple[str, ...], item: Any, path: Path, position: int) -> PathElement:
        """The path element of one item of an associative list (structured-merge-diff's listItemToPathElement)."""
        if not keys:
            if isinstance(item, dict):
                problem = "associative list without keys has an element that's a map type"
            elif isinstance(item, list):
                problem = "not supported: associative list with lists as elements"
            elif item is None:
                problem = "associative list without keys has an element that's an explicit null"
            else:
                return item_value(item)
            raise StructureError(path, f"element {position}: {problem}")
        if item is None:
            raise StructureError(path, f"element {position}: associative list with keys may not have a null element")
        if not isinstance(item, dict):
            raise StructureError(path, f"element {position}: associative list with keys may not have non-map elements")
        missing = [name for name in keys if name not in item]
        if missing:
            raise StructureError(
                path,
                f'element {position}: associative list with keys has an element that omits key field "{missing[0]}"'
                " (and doesn't have default value)",
            )
        return keyed({name: item[name] for name in keys})

    def index_items(
        self, keys: tuple[str, ...], items: list[Any], path: Path, *, strict: bool
    ) -> list[tuple[PathElement, Any]]:
        """The items of an associative list with their elements, in list order.

        ``strict`` (an applied configuration) refuses duplicate keys as structured-merge-diff does; otherwise
        (stored or written objects) duplicates are kept, and callers use the first occurrence of a key.
        """
        indexed: list[tuple[PathElement, Any]] = []
        seen: set[PathElement] = set()
        for position, item in enumerate(items):
            element = self.item_element(keys, item, path, position)
            if element in seen and strict:
                raise StructureError(path, f"duplicate entries for key {element}")
            seen.add(element)
            indexed.append((element, item))
        return indexed


@functools.lru_cache(maxsize=8192)
def schema_path_of(path: Path) -> str:
    """``spec.sidecars.env`` for ``.spec.sidecars[name="a"].env``: the dotted form :class:`ListTypes` is keyed by."""
    return ".".join(element.name for element in path if element.kind == FIELD)


def strip_untracked(fields: FieldSet) -> FieldSet:
    return fields - UNTRACKED


# The top-level fields each write path may own; the others are reset by the kind's strategy and never owned.
_STATUS_SCOPE = frozenset({"apiVersion", "kind", "metadata", "status"})


class Scope:
    """The part of an object a write through one subresource may own.

    The main resource never owns ``status`` (kube-apiserver's reset fields for a custom resource with a status
    subresource); ``/status`` owns only ``status`` and ``metadata`` (kube-apiserver resets ``spec``; Nodus kinds have
    no other top-level fields, so "everything but metadata and status" is the same rule stated for any kind).
    """

    __slots__ = ("subresource",)

    def __init__(self, subresource: str) -> None:
        self.subresource = subresource

    def owns(self, path: Path) -> bool:
        top = path[0]
        if top.kind != FIELD:
            return False
        if self.subresource == "status":
            return top.name in _STATUS_SCOPE
        return top.name != "status"

    def restrict(self, fields: FieldSet) -> FieldSet:
        return fields.keep(self.owns)
