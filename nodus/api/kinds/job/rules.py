"""The shapes that cross-field rules share: uniqueness by key, and exactly one of several fields.

Both read raw JSON leniently: an item that is not an object, or a key of the wrong type, is skipped
(the model validation reports it), so a malformed request never yields a second error for the same
mistake, and never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodus.api.kinds.job.jsonview import JSONObject, is_set, objects
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path


def duplicates(items: object, path: Path, key: str) -> list[FieldError]:
    """A ``FieldValueDuplicate`` at ``path[i].key`` for every item whose string ``key`` an earlier item has."""
    seen: set[str] = set()
    errors: list[FieldError] = []
    for index, item in objects(items):
        value = item.get(key)
        if not isinstance(value, str):
            continue
        if value in seen:
            errors.append(fieldpath.duplicate(path.index(index).child(key), value))
        seen.add(value)
    return errors


def exactly_one_of(
    obj: JSONObject, path: Path, members: Sequence[str], missing_at: Path | None = None
) -> list[FieldError]:
    """Errors unless exactly one of ``members`` is set in ``obj`` (at ``path``).

    None set: a ``FieldValueRequired`` at ``missing_at`` (default ``path``). Several set: a
    ``FieldValueForbidden`` at each member after the first, naming the first.
    """
    choices = f"set exactly one of {_either(members)}"
    present = [member for member in members if is_set(obj, member)]
    if not present:
        return [fieldpath.required(missing_at or path, choices)]
    first = present[0]
    return [
        fieldpath.forbidden(path.child(member), f"may not be set together with {path.child(first)}: {choices}")
        for member in present[1:]
    ]


def _either(members: Sequence[str]) -> str:
    return members[0] if len(members) == 1 else f"{', '.join(members[:-1])} or {members[-1]}"
