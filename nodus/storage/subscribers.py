"""The watch cache's live subscribers of one kind, indexed by what they select, so that an event is offered only
to the subscribers that could see it.

A subscriber may name an *index key*: ``("name", N)`` when it sees only the object named N (a ``metadata.name``
field selector: an agent watching its Node), or ``(L, V)`` when it sees only objects whose label L is V (an
equality label selector: an agent watching the Attempts labelled with its node). Everything else it selects
is still checked by the subscriber itself; the index only has to be *complete*: every subscriber that would
see an event is among its candidates. For a label, an object that moves out of the selection must reach the
subscriber too (it sees a DELETED), so an event's candidates include those indexed under its previous labels.

Without an index every event of a kind went to every watcher of the kind: with 2,000 agents, 2,000 filter
calls per Node or Attempt event in every API server, for the one watcher that wanted it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

# The index key's first element for a subscriber of one object by name; any other is a label key, which can never
# start with a colon.
NAME = ":name"


class Indexed(Protocol):
    """What the registry needs of a subscriber: its index key, or None to be offered every event."""

    index: tuple[str, str] | None


class EventKeys(Protocol):
    name: str
    labels: dict[str, str]
    prev_labels: dict[str, str] | None


class Subscribers:
    """The subscribers of one kind: the unindexed ones, and the indexed ones by name and by label value."""

    def __init__(self) -> None:
        self._everything: set[Any] = set()
        self._by_name: dict[str, set[Any]] = {}
        self._by_label: dict[str, dict[str, set[Any]]] = {}  # label key -> value -> subscribers

    def __len__(self) -> int:
        named = sum(len(s) for s in self._by_name.values())
        labelled = sum(len(s) for values in self._by_label.values() for s in values.values())
        return len(self._everything) + named + labelled

    def add(self, subscriber: Indexed) -> None:
        self._bucket(subscriber, create=True).add(subscriber)  # type: ignore[union-attr]

    def discard(self, subscriber: Indexed) -> None:
        bucket = self._bucket(subscriber, create=False)
        if bucket is None:
            return
        bucket.discard(subscriber)
        if not bucket and subscriber.index is not None:  # no empty buckets: an event looks up only live keys
            key, value = subscriber.index
            if key == NAME:
                del self._by_name[value]
            else:
                values = self._by_label[key]
                del values[value]
                if not values:
                    del self._by_label[key]

    def candidates(self, event: EventKeys) -> list[Any]:
        """The subscribers that could see ``event``: a list (a subscriber may unsubscribe while it is fed)."""
        found = list(self._everything)
        if self._by_name:
            found.extend(self._by_name.get(event.name, ()))
        if self._by_label:
            labels, before = event.labels or {}, event.prev_labels
            for key, values in self._by_label.items():
                now = labels.get(key)
                if now is not None:
                    found.extend(values.get(now, ()))
                if before is not None:
                    then = before.get(key)
                    if then is not None and then != now:
                        found.extend(values.get(then, ()))
        return found

    def __iter__(self) -> Iterator[Any]:
        yield from self._everything
        for bucket in self._by_name.values():
            yield from bucket
        for values in self._by_label.values():
            for bucket in values.values():
                yield from bucket

    def _bucket(self, subscriber: Indexed, create: bool) -> set[Any] | None:
        index = subscriber.index
        if index is None:
            return self._everything
        key, value = index
        if key == NAME:
            return self._by_name.setdefault(value, set()) if create else self._by_name.get(value)
        if create:
            return self._by_label.setdefault(key, {}).setdefault(value, set())
        return self._by_label.get(key, {}).get(value)


def index_of(name_values: Iterable[str], label_equalities: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """The index key for a subscriber that selects exactly the names ``name_values`` (one name: indexed) and
    requires the label equalities ``label_equalities`` (the first one: indexed); None when neither narrows it."""
    names = list(name_values)
    if len(names) == 1:
        return (NAME, names[0])
    for key, value in label_equalities:
        return (key, value)
    return None
