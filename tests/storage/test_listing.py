"""Lists: one snapshot across pages, selectors in SQL, and the retention window."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from nodus.apimachinery.selectors import parse_field_selector, parse_label_selector
from nodus.storage.errors import Expired, Key, TooLarge
from nodus.storage.listing import ListQuery
from nodus.storage.objects import Storage
from tests.storage.conftest import job, unique_namespace


async def _page(storage: Storage, query: ListQuery) -> tuple[list[str], int, tuple[str, str] | None, int | None]:
    async with storage.open_list(query) as cursor:
        names = [row[1] async for batch in cursor.batches() for row in batch]
        return names, cursor.resource_version, cursor.continue_after, cursor.remaining


async def test_pages_show_one_snapshot_while_objects_change(storage: Storage) -> None:
    namespace = unique_namespace()
    for i in range(60):
        await storage.create(Key("Job", namespace, f"j{i:03d}"), job(namespace, f"j{i:03d}"))
    names, rv, after, remaining = await _page(storage, ListQuery("Job", namespace, limit=25))
    assert names == [f"j{i:03d}" for i in range(25)]
    assert remaining == 35
    # Change the world between pages: delete one not yet listed, add one, modify one.
    gone = await storage.get(Key("Job", namespace, "j040"))
    assert gone is not None
    await storage.delete(Key("Job", namespace, "j040"), gone, int(gone["metadata"]["resourceVersion"]))
    await storage.create(Key("Job", namespace, "j030a"), job(namespace, "j030a"))
    changed = await storage.get(Key("Job", namespace, "j050"))
    assert changed is not None
    changed["metadata"]["labels"] = {"changed": "yes"}
    await storage.update(Key("Job", namespace, "j050"), changed, int(changed["metadata"]["resourceVersion"]))

    rest: list[str] = []
    while after is not None:
        page, page_rv, after, remaining = await _page(
            storage, ListQuery("Job", namespace, limit=25, after=after, at_rv=rv)
        )
        assert page_rv == rv
        rest += page
    assert names + rest == [f"j{i:03d}" for i in range(60)], "a later page saw changes made after the first"
    # The snapshot returns j050 as it was, without the new label.
    old, _, _, _ = await _page(
        storage, ListQuery("Job", namespace, labels=parse_label_selector("changed=yes"), at_rv=rv)
    )
    assert old == []
    now, _, _, _ = await _page(storage, ListQuery("Job", namespace, labels=parse_label_selector("changed=yes")))
    assert now == ["j050"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("tier=gpu", {"a", "b"}, id="equals"),
        pytest.param("tier!=gpu", {"c", "d"}, id="not-equals-includes-missing-key"),
        pytest.param("tier in (gpu,cpu)", {"a", "b", "c"}, id="in"),
        pytest.param("tier notin (gpu)", {"c", "d"}, id="notin-includes-missing-key"),
        pytest.param("tier", {"a", "b", "c"}, id="exists"),
        pytest.param("!tier", {"d"}, id="does-not-exist"),
        pytest.param("tier=gpu,size>4", {"b"}, id="and-greater-than"),
        pytest.param("size<4", {"a"}, id="less-than"),
    ],
)
async def test_label_selectors(storage: Storage, selector: str, expected: set[str]) -> None:
    namespace = unique_namespace()
    labels = {"a": {"tier": "gpu", "size": "2"}, "b": {"tier": "gpu", "size": "8"}, "c": {"tier": "cpu"}, "d": {}}
    for name, value in labels.items():
        await storage.create(Key("Job", namespace, name), job(namespace, name, value))
    names, _, _, _ = await _page(storage, ListQuery("Job", namespace, labels=parse_label_selector(selector)))
    assert set(names) == expected


async def test_field_selectors(storage: Storage) -> None:
    namespace = unique_namespace()
    for name, phase in (("a", "Running"), ("b", "Queued"), ("c", None)):
        await storage.create(Key("Job", namespace, name), job(namespace, name, phase=phase))
    fields = ("metadata.name", "metadata.namespace", "status.phase")
    running, _, _, _ = await _page(
        storage, ListQuery("Job", namespace, fields=parse_field_selector("status.phase=Running", fields))
    )
    assert running == ["a"]
    others, _, _, _ = await _page(
        storage, ListQuery("Job", namespace, fields=parse_field_selector("status.phase!=Running", fields))
    )
    assert others == ["b", "c"]


async def test_random_limits_cover_everything_exactly_once(storage: Storage) -> None:
    namespace = unique_namespace()
    for i in range(120):
        await storage.create(Key("Job", namespace, f"x{i:03d}"), job(namespace, f"x{i:03d}"))
    generator = random.Random(7)
    names, rv, after, remaining = await _page(storage, ListQuery("Job", namespace, limit=generator.randint(1, 30)))
    total = list(names)
    while after is not None:
        assert remaining == 120 - len(total)
        names, page_rv, after, remaining = await _page(
            storage, ListQuery("Job", namespace, limit=generator.randint(1, 30), after=after, at_rv=rv)
        )
        assert page_rv == rv
        total += names
    assert total == [f"x{i:03d}" for i in range(120)]


async def test_versions_outside_the_log_are_refused(storage: Storage) -> None:
    namespace = unique_namespace()
    await storage.create(Key("Job", namespace, "old"), job(namespace, "old"))
    early = await storage.current_rv()
    await storage.create(Key("Job", namespace, "new"), job(namespace, "new"))
    with pytest.raises(TooLarge):
        await _page(storage, ListQuery("Job", namespace, at_rv=early + 10_000))
    storage.retention = timedelta(seconds=0)
    compacted = await storage.compact()
    assert compacted >= early
    with pytest.raises(Expired):
        await _page(storage, ListQuery("Job", namespace, at_rv=early - 1))
    with pytest.raises(Expired):
        await storage.watch_cache.check(early - 1)
