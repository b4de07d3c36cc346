"""Offerings follow the price book: at start the API server makes the stored Offerings equal to it.

:func:`sync` creates the offerings the book has and storage lacks, rewrites the spec (and the
``nodus.dev/pricebook-version`` label) of those that differ, and deletes those the book no longer
has. It writes through the generic store as the system (no user authorisation: Offerings are
read-only through the API), so every write is validated and emits its watch event like any other;
its store's strategy is the only one that may change an Offering's spec (:data:`WRITER`).

``status`` belongs to the provider (``status.capacity``) and is never touched: an update goes
through the main path, which carries the old status over.

Several API servers may start at once with the same book: each step tolerates the others' writes
(AlreadyExists on create, NotFound on delete; an update re-reads and retries on Conflict), and
writing what is already stored changes nothing, so the outcome is the same however they interleave.
Servers with different books (during an upgrade) each make the store equal to their own book when
they start: the last to start wins.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from nodus.api.auth.principal import ADMIN_GROUP, Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.kinds.offering import OFFERING, OfferingStrategy
from nodus.api.store import GenericStore
from nodus.apis.v1 import accelerators
from nodus.catalog import pricebook
from nodus.catalog.pricebook import PriceBook
from nodus.storage.listing import ListQuery
from nodus.storage.objects import Storage

log = logging.getLogger(__name__)

PRICEBOOK = Principal(user="system:nodus-pricebook", groups=(ADMIN_GROUP,))
FIELD_MANAGER = "nodus-pricebook"
_TRIES = 4


# The store the price book writes through: the Offering kind, with a strategy that lets it change specs.
WRITER = dataclasses.replace(OFFERING, strategy=OfferingStrategy(from_price_book=True))


def load(path: Path | None) -> PriceBook:
    """The price book at ``path`` (None: the shipped one), checked against the accelerator catalog.

    Raises :class:`nodus.catalog.pricebook.PriceBookError` naming every problem."""
    return pricebook.load(path, accelerators.CATALOG)


@dataclass(frozen=True)
class SyncResult:
    created: tuple[str, ...]
    updated: tuple[str, ...]
    deleted: tuple[str, ...]


async def sync(storage: Storage, book: PriceBook) -> SyncResult:
    """Make the stored Offerings equal to ``book``. Idempotent; safe when several servers run it at once."""
    store = GenericStore(storage, WRITER)
    context = RequestContext(principal=PRICEBOOK, request_id="pricebook-sync", field_manager=FIELD_MANAGER)
    stored = await _stored(store)
    written: dict[str, list[str]] = {"created": [], "updated": []}
    deleted = []
    for offering in book.offerings:
        body = offering.body()
        current = stored.get(offering.name)
        if current is not None and not _differs(current, body):
            continue
        outcome = await _put(store, body, context, exists=current is not None)
        if outcome is not None:
            written[outcome].append(offering.name)
    created, updated = written["created"], written["updated"]
    for name in sorted(set(stored) - set(book.by_name())):
        if await _delete(store, name, context):
            deleted.append(name)
    if created or updated or deleted:
        log.info(
            "offerings follow price book %s (%s): %d created, %d updated, %d deleted",
            book.version,
            book.source,
            len(created),
            len(updated),
            len(deleted),
        )
    return SyncResult(tuple(created), tuple(updated), tuple(deleted))


async def _stored(store: GenericStore) -> dict[str, dict[str, Any]]:
    async with store.storage.open_list(ListQuery(kind=store.info.kind)) as cursor:
        return {name: orjson.loads(body) async for batch in cursor.batches() for _, name, body in batch}


def _differs(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    labels = current["metadata"].get("labels") or {}
    return current.get("spec") != wanted["spec"] or any(
        labels.get(key) != value for key, value in wanted["metadata"]["labels"].items()
    )


async def _put(store: GenericStore, body: dict[str, Any], context: RequestContext, exists: bool) -> str | None:
    """Create the offering or bring its spec and labels to ``body``: "created", "updated", or None when
    nothing needed writing.

    Another server may create or delete it in between: AlreadyExists turns a create into an update
    and NotFound an update into a create, a bounded number of times."""
    name = body["metadata"]["name"]
    for _ in range(_TRIES):
        try:
            if not exists:
                await store.create(None, copy.deepcopy(body), context)
                return "created"
            return "updated" if await _update(store, body, context) else None
        except APIError as error:
            if error.reason == "AlreadyExists":
                exists = True
            elif error.reason == "NotFound":
                exists = False
            elif error.reason == "Conflict":  # too many concurrent writes: the others write the same book
                log.warning("offering %s: %s", name, error.message)
                return None
            else:
                raise
    log.warning("offering %s: created and deleted concurrently %d times; left as it is", name, _TRIES)
    return None


async def _update(store: GenericStore, body: dict[str, Any], context: RequestContext) -> bool:
    """Set the spec and the book's labels; other labels and the status stay as they are."""
    changed = False

    def apply(current: dict[str, Any]) -> dict[str, Any]:
        nonlocal changed
        changed = _differs(current, body)
        current["spec"] = copy.deepcopy(body["spec"])
        current["metadata"]["labels"] = {**(current["metadata"].get("labels") or {}), **body["metadata"]["labels"]}
        return current

    await store.patch(None, body["metadata"]["name"], apply, context)
    return changed


async def _delete(store: GenericStore, name: str, context: RequestContext) -> bool:
    try:
        await store.delete(None, name, {}, context)
    except APIError as error:
        if error.reason != "NotFound":
            raise
        return False
    return True
