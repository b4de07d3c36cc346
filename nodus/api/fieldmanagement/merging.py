"""The server-side apply merge, and the removal of fields an applier stopped applying.

:func:`merge` merges an applied configuration into the live object (structured-merge-diff's ``Merge``):

- objects merge key by key; the configuration's value wins for scalars and atomic lists;
- keyed lists and sets merge item by item; an item present on both sides is merged recursively;
- item order (structured-merge-diff's rule): the configuration's items keep the configuration's relative order;
  live items the configuration does not mention stay where they were relative to the items around them. Walking
  both lists, a live item not in the configuration is emitted in place, an item in both is emitted when the
  configuration reaches it, and a configuration-only item is emitted when the configuration reaches it. So with
  live ``[a, x, b]`` and configuration ``[b, a]`` the result is ``[x, b, a]``;
- a null in the configuration removes a scalar or atomic list (custom resources prune non-nullable nulls after the
  merge) and leaves an object or associative list as it is; a merged object or associative list that ends up empty
  is dropped.

:func:`prune` then removes what the applier owned after its previous apply and no longer applies, unless another
manager (applier or updater) owns it, in structured-merge-diff's three steps (remove the applier's old fields, add
back what any manager owns, add back what the applier never owned). Removing a field removes everything below it;
an object or associative list emptied by a removal is removed too.

All functions return new values and never modify their arguments.
"""

from __future__ import annotations

import copy
from typing import Any

from nodus.api.fieldmanagement.comparison import (
    MISSING,
    as_dict,
    as_list,
    field_set,
    first_by_element,
    shape,
)
from nodus.api.fieldmanagement.fieldsets import FieldSet, Path, PathElement, field
from nodus.api.fieldmanagement.schema import ListTypes, StructureError


def merge(live: dict[str, Any], config: dict[str, Any], types: ListTypes) -> dict[str, Any]:
    """``config`` merged into ``live``; ``config`` must already be known to be well formed."""
    merged = _merge(live, config, (), types)
    return merged if isinstance(merged, dict) else {}


def _merge(live: Any, config: Any, path: Path, types: ListTypes) -> Any:
    if config is MISSING:
        return copy.deepcopy(live)
    kind = shape(live, config)
    keys = types.keys_at(path)
    if kind == "map" and (as_dict(live) or as_dict(config)):
        return _merge_map(as_dict(live), as_dict(config), path, types)
    if kind == "list" and keys is not None and (as_list(live) or as_list(config)):
        return _merge_list(keys, as_list(live), as_list(config), path, types)
    # A leaf: the configuration wins; a null it sets is pruned like any non-nullable null of a custom resource.
    return MISSING if config is None else copy.deepcopy(config)


def _merge_map(live: dict[str, Any], config: dict[str, Any], path: Path, types: ListTypes) -> Any:
    out: dict[str, Any] = {}
    for name in [*live, *(name for name in config if name not in live)]:
        value = _merge(live.get(name, MISSING), config.get(name, MISSING), (*path, field(name)), types)
        if value is not MISSING:
            out[name] = value
    return out if out else MISSING


def _merge_list(keys: tuple[str, ...], live: list[Any], config: list[Any], path: Path, types: ListTypes) -> Any:
    live_items = types.index_items(keys, live, path, strict=False)
    config_items = types.index_items(keys, config, path, strict=True)
    live_by_element = first_by_element(live_items)
    config_by_element = dict(config_items)
    shared = [element for element, _ in config_items if element in live_by_element]
    next_shared = 0  # index into `shared` of the next item both sides have, in configuration order
    merged_from_config: set[PathElement] = set()
    out: list[Any] = []

    def emit(element: PathElement, live_item: Any, config_item: Any) -> None:
        value = _merge(live_item, config_item, (*path, element), types)
        if value is not MISSING:
            out.append(value)

    live_at = config_at = 0
    while live_at < len(live_items) or config_at < len(config_items):
        if live_at < len(live_items) and config_at < len(config_items):
            element, live_item = live_items[live_at]
            if element == config_items[config_at][0]:
                merged_from_config.add(element)
                emit(element, live_item, config_by_element[element])
                live_at += 1
                config_at += 1
                next_shared += 1
                continue
            if element in config_by_element and next_shared < len(shared) and shared[next_shared] != element:
                # Both sides have it, but the configuration places it later: it is emitted when reached there.
                live_at += 1
                continue
        if live_at < len(live_items):
            element, live_item = live_items[live_at]
            if element not in config_by_element:
                emit(element, live_item, MISSING)
                live_at += 1
                continue
            if element in merged_from_config:
                live_at += 1
                continue
        if config_at < len(config_items):
            element, config_item = config_items[config_at]
            merged_from_config.add(element)
            emit(element, live_by_element.get(element, MISSING), config_item)
            config_at += 1
            if next_shared < len(shared) and shared[next_shared] == element:
                next_shared += 1
        else:
            live_at += 1
    return out if out else MISSING


def remove(value: dict[str, Any], paths: FieldSet, types: ListTypes) -> dict[str, Any]:
    """``value`` without the fields in ``paths`` (structured-merge-diff's ``RemoveItems``)."""
    result = _remove(value, paths, (), types)
    return result if isinstance(result, dict) else {}


def _remove(value: Any, paths: FieldSet, path: Path, types: ListTypes) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for name, child in value.items():
            element = field(name)
            if (element,) in paths:
                continue
            kept = child
            if paths.has_children(element):
                kept = _remove(child, paths.children_of(element), (*path, element), types)
                if kept is MISSING:
                    continue
            out[name] = copy.deepcopy(kept)
        return out if out else MISSING
    keys = types.keys_at(path)
    if isinstance(value, list):
        if keys is None:
            # Owning something below an atomic list means owning the list: it goes as a whole.
            return MISSING
        items: list[Any] = []
        for position, item in enumerate(value):
            try:
                element = types.item_element(keys, item, path, position)
            except StructureError:
                items.append(copy.deepcopy(item))
                continue
            if (element,) in paths:
                continue
            kept = item
            if paths.has_children(element):
                kept = _remove(item, paths.children_of(element), (*path, element), types)
                if kept is MISSING:
                    continue
            items.append(copy.deepcopy(kept))
        return items if items else MISSING
    return copy.deepcopy(value)


def prune(merged: dict[str, Any], last_applied: FieldSet | None, managed: FieldSet, types: ListTypes) -> dict[str, Any]:
    """Remove from ``merged`` what the applier applied last time (``last_applied``) and no longer owns.

    ``managed`` is the union of every manager's set, the applier's new set included. A field goes only if the
    applier owned it, nobody owns it now, and nobody owns anything below it.
    """
    if not last_applied:
        return merged
    last = last_applied.with_named_parents()
    merged_fields = field_set(merged, types).with_named_parents()
    without_last = remove(merged, last, types)
    # Add back everything some manager owns: remove only what is neither kept nor owned.
    kept = field_set(without_last, types).with_named_parents() | managed.with_named_parents()
    without_unowned = remove(merged, merged_fields - kept, types)
    # Add back what the applier never owned (unowned fields, fields only updaters set).
    lost = merged_fields - field_set(without_unowned, types).with_named_parents()
    return remove(merged, lost & last, types)
