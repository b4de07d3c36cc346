"""The watch cache's subscriber index (``nodus.storage.subscribers``): an event is offered to every watcher that
would see it, whatever it selects, and indexed watchers are spared the events they would not."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from nodus.api.http.watches import WatchFilter
from nodus.apimachinery.selectors import parse_field_selector, parse_label_selector
from nodus.storage.subscribers import Subscribers
from nodus.storage.watchcache import Event

NAMES = ["a", "b", "c"]
KEYS = ["node", "tier", "name"]  # "name" as a label key must not be taken for the object's name
VALUES = ["x", "y", ""]


@dataclass(eq=False)
class _Watcher:
    filter: WatchFilter
    kind: str = "Attempt"

    def __post_init__(self) -> None:
        self.index = self.filter.index()


labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES[:2]), max_size=3)


@st.composite
def label_selectors(draw: st.DrawFn) -> str:
    parts = []
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True)):
        form = draw(st.sampled_from(["eq", "ne", "in1", "in2", "exists", "absent"]))
        value = draw(st.sampled_from(VALUES[:2]))
        parts.append(
            {
                "eq": f"{key}={value}",
                "ne": f"{key}!={value}",
                "in1": f"{key} in ({value})",
                "in2": f"{key} in (x,y)",
                "exists": key,
                "absent": f"!{key}",
            }[form]
        )
    return ",".join(parts)


@st.composite
def field_selectors(draw: st.DrawFn) -> str:
    parts = [
        f"metadata.name{draw(st.sampled_from(['=', '!=']))}{name}"
        for name in draw(st.lists(st.sampled_from(NAMES), max_size=2))
    ]
    return ",".join(parts)


@st.composite
def events(draw: st.DrawFn) -> Event:
    kind = draw(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]))
    return Event(
        rv=1,
        type=kind,
        kind="Attempt",
        namespace="p",
        name=draw(st.sampled_from(NAMES)),
        body=b"{}",
        labels=draw(labels),
        phase=None,
        prev_labels=draw(labels) if kind == "MODIFIED" else None,
        prev_phase=None,
    )


def _watcher(labels_text: str, fields_text: str) -> _Watcher:
    return _Watcher(
        WatchFilter(
            "Attempt",
            True,
            None,
            None,
            parse_label_selector(labels_text),
            parse_field_selector(fields_text, ["metadata.name"]),
        )
    )


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(label_selectors(), field_selectors()), min_size=1, max_size=8), st.lists(events(), max_size=6)
)
def test_every_watcher_that_would_see_an_event_is_offered_it(
    selectors: list[tuple[str, str]], stream: list[Event]
) -> None:
    watchers = [_watcher(labels_text, fields_text) for labels_text, fields_text in selectors]
    registry = Subscribers()
    for watcher in watchers:
        registry.add(watcher)
    for event in stream:
        offered = registry.candidates(event)
        assert len(offered) == len(set(map(id, offered)))  # nobody twice
        for watcher in watchers:
            if watcher.filter.classify(event) is not None:
                assert watcher in offered, (watcher.filter, event)


def test_indexed_watchers_are_spared_what_they_would_not_see() -> None:
    registry = Subscribers()
    agents = [_watcher(f"nodus.dev/node=host-{i}", "") for i in range(1000)]
    nodes = [_watcher("", f"metadata.name=host-{i}") for i in range(1000)]
    everything = _watcher("", "")
    for watcher in [*agents, *nodes, everything]:
        registry.add(watcher)
    assert len(registry) == 2001
    moved = Event(
        rv=1,
        type="MODIFIED",
        kind="Attempt",
        namespace="p",
        name="host-7",
        body=b"{}",
        labels={"nodus.dev/node": "host-3"},
        phase=None,
        prev_labels={"nodus.dev/node": "host-5"},
        prev_phase=None,
    )
    assert set(map(id, registry.candidates(moved))) == {id(everything), id(nodes[7]), id(agents[3]), id(agents[5])}
    for watcher in [*agents, *nodes, everything]:
        registry.discard(watcher)
    assert len(registry) == 0 and registry.candidates(moved) == []
    assert not registry._by_name and not registry._by_label  # no empty buckets left behind
