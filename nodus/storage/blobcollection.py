"""What the blob collector reads and deletes: references, stamps, unreferenced rows and orphaned objects.

The rules are ADR 0034's; the pass that applies them in order is ``nodus.api.blobcollection``. Here:

* **References** (:func:`references`). A blob of a project is referenced while an object of the
  project that may name blobs (:data:`REFERRING_KINDS`: Jobs, Attempts, Volumes, Workspaces) names its digest
  anywhere in its body, as ``sha256:<hex>`` or as the bare hex of ``sha256`` fields: a Job's outputs,
  inputs and source, an Attempt's pinned inputs, volumes, source, restore and checkpoints (a gang's
  shards too), a Volume's revisions. Matching every digest-shaped string rather than a list of fields
  means a field added later cannot be forgotten; a string that only looks like a digest keeps a blob
  longer, which is billed, where a forgotten field would lose data. The chunks of a referenced
  checkpoint manifest are referenced too (:func:`manifest_chunks`).
* **Stamps.** The collector refreshes ``referenced_at`` of what is referenced
  (``nodus.storage.blobs.refresh``) and ``attributed_until`` of what Jobs bill as outputs
  (:func:`attribute`), both locking rows in digest order.
* **Collection** (:func:`collect`): one row at a time, under the locks ``blobs.put`` takes to register
  (the project's usage row, then the per-digest advisory lock), the row is deleted, and its bytes taken
  from the project's usage, only if it is still unreferenced for longer than the grace period (a
  concurrent upload of the same bytes refreshes it first, under those locks); then, if no other
  project's row points at its upload, the object is deleted after the commit (a crash in between
  leaves an object no row names, which :func:`sweep` removes).
* **Orphans** (:func:`sweep`): objects under ``uploads/`` that no row names, once older than the
  grace period: a process died between writing the object and registering it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodus.storage import blobs
from nodus.storage.objects import Storage
from nodus.storage.objectstore import ObjectStore

REFERRING_KINDS = ("Job", "Attempt", "Volume", "Workspace")
"""The kinds whose objects may name blobs; a kind that comes to name blobs must be added here."""

CHECKPOINT_MANIFEST_MEDIA_TYPE = "application/vnd.nodus.checkpoint.manifest+json"
"""The media type the agent uploads checkpoint manifests with (``nodus.agent.checkpointstore``)."""

MAX_MANIFEST_BYTES = 256 * 1024 * 1024
"""A larger manifest is read as naming nothing; the agent refuses to restore one that large too. A
manifest is read as it streams: what is held is the digests it names (a TiB of 4 MiB chunks: 262,144)."""

_UPLOADS = "uploads/"
_DIGEST_STRINGS = 'strict $.** ? (@.type() == "string" && @ like_regex "^(sha256:)?[0-9a-f]{64}$")'


def _digest(value: str) -> str:
    return value if value.startswith(blobs.DIGEST_PREFIX) else blobs.DIGEST_PREFIX + value


@dataclass(frozen=True)
class References:
    """What a project's objects name: every digest (``sha256:<hex>``), and those its Jobs' committed
    outputs name (the bytes Jobs bill)."""

    digests: frozenset[str]
    outputs: frozenset[str]


async def references(storage: Storage, namespace: str) -> References:
    """Every digest the objects of ``namespace`` in :data:`REFERRING_KINDS` name (see the module docstring)."""
    async with storage._connection() as conn:
        named = await conn.fetch(
            "SELECT DISTINCT v #>> '{}' AS digest FROM objects o, "
            "jsonb_path_query(o.body::jsonb, $3::jsonpath) v WHERE o.namespace = $1 AND o.kind = ANY($2::text[])",
            namespace,
            list(REFERRING_KINDS),
            _DIGEST_STRINGS,
        )
        outputs = await conn.fetch(
            "SELECT DISTINCT v #>> '{}' AS digest FROM objects o, "
            "jsonb_path_query(o.body::jsonb, 'lax $.status.outputs[*].sha256') v "
            "WHERE o.namespace = $1 AND o.kind = 'Job' AND jsonb_typeof(v) = 'string'",
            namespace,
        )
    return References(
        frozenset(_digest(r["digest"]) for r in named),
        frozenset(_digest(r["digest"]) for r in outputs if blobs.is_digest(_digest(r["digest"]))),
    )


async def manifests(storage: Storage, namespace: str, digests: Iterable[str]) -> list[blobs.BlobInfo]:
    """The blobs among ``digests`` that ``namespace`` stores as checkpoint manifests."""
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "SELECT digest, size, media_type, upload_id FROM blobs "
            "WHERE namespace = $1 AND digest = ANY($2::text[]) AND media_type = $3",
            namespace,
            sorted(set(digests)),
            CHECKPOINT_MANIFEST_MEDIA_TYPE,
        )
    return [blobs.BlobInfo(r["digest"], r["size"], r["media_type"], r["upload_id"]) for r in rows]


class _ManifestScan:
    """Finds the digests a checkpoint manifest names as its bytes go by, holding only the digests found and
    a few bytes across pieces: a manifest is canonical JSON (``nodus.agent.manifests``) whose only strings
    of the form ``"sha256:<hex>"`` are the chunks of its entries. A digest spelled with JSON escapes is not
    found: a manifest is the agent's, and one made otherwise only loses its own chunks."""

    _DIGEST = re.compile(rb'"(sha256:[0-9a-f]{64})"')
    _KIND = b'"kind":"CheckpointManifest"'
    _KEEP = 80  # more than the longest token minus one, so that a token cut between pieces is seen whole

    def __init__(self) -> None:
        self.found: set[str] = set()
        self.is_manifest = False
        self._tail = b""

    def feed(self, piece: bytes) -> None:
        data = self._tail + piece
        self.found.update(m.group(1).decode() for m in self._DIGEST.finditer(data))
        self.is_manifest = self.is_manifest or self._KIND in data
        self._tail = data[-self._KEEP :]

    def chunks(self) -> frozenset[str] | None:
        return frozenset(self.found) if self.is_manifest else None


def manifest_chunks(data: bytes) -> frozenset[str] | None:
    """The chunk digests a checkpoint manifest names (``entries[].chunks``); None when ``data`` is not a
    ``CheckpointManifest`` (then it names nothing)."""
    scan = _ManifestScan()
    scan.feed(data)
    return scan.chunks()


async def read_manifest(store: ObjectStore, info: blobs.BlobInfo) -> frozenset[str] | None:
    """The chunks of the stored manifest ``info``, read as it streams (None: not a manifest, or larger
    than one can be)."""
    if info.size > MAX_MANIFEST_BYTES:
        return None
    scan = _ManifestScan()
    async for piece in blobs.read(store, info):
        scan.feed(piece)
    return scan.chunks()


async def attribute(storage: Storage, namespace: str, digests: Iterable[str], until: datetime, below: datetime) -> None:
    """Record that Jobs bill the blobs ``digests`` of ``namespace`` until ``until``: rows whose
    ``attributed_until`` is before ``below`` (or unset) are moved to ``until``; later ones are left alone
    (so a pass writes only every so often), and none is moved back."""
    wanted = sorted(set(digests))
    if not wanted:
        return
    async with storage._connection() as conn:
        await conn.execute(
            "WITH locked AS (SELECT digest FROM blobs WHERE namespace = $1 AND digest = ANY($2::text[]) "
            "AND (attributed_until IS NULL OR attributed_until < $4) ORDER BY digest FOR UPDATE) "
            "UPDATE blobs b SET attributed_until = greatest(b.attributed_until, $3) FROM locked "
            "WHERE b.namespace = $1 AND b.digest = locked.digest",
            namespace,
            wanted,
            until,
            below,
        )


async def namespaces(storage: Storage) -> list[str]:
    """The projects that store blobs."""
    async with storage._connection() as conn:
        return [r["namespace"] for r in await conn.fetch("SELECT DISTINCT namespace FROM blobs ORDER BY namespace")]


async def candidates(storage: Storage, namespace: str, grace: timedelta, limit: int = 1000) -> list[str]:
    """Digests of ``namespace`` nothing has referenced for longer than ``grace`` (at most ``limit``)."""
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "SELECT digest FROM blobs WHERE namespace = $1 AND referenced_at < now() - $2::interval "
            "ORDER BY digest LIMIT $3",
            namespace,
            grace,
            limit,
        )
    return [r["digest"] for r in rows]


@dataclass(frozen=True)
class Collected:
    """A row deleted: its digest and size, and whether its object went too (no other row named it)."""

    digest: str
    size: int
    object_deleted: bool


async def collect(
    storage: Storage,
    store: ObjectStore,
    namespace: str,
    digest: str,
    grace: timedelta | None,
    before: datetime | None = None,
) -> Collected | None:
    """Delete the blob ``digest`` of ``namespace`` if it is still unreferenced for longer than ``grace``
    (None: whenever it was last referenced, for a project that is gone) and, with ``before``, only while the
    database's clock is before it: the end of the project's current storage hour, so a row is never deleted
    in an hour not yet sampled. None when it was kept."""
    async with storage._connection() as conn, conn.transaction():
        # The locks of a registration, in its order: the project's usage row, then the digest's lock.
        await conn.execute("SELECT 1 FROM blob_usage WHERE namespace = $1 FOR UPDATE", namespace)
        await conn.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))", blobs._LOCK_CLASS, digest)
        row = await conn.fetchrow(
            "DELETE FROM blobs WHERE namespace = $1 AND digest = $2 "
            "AND ($3::interval IS NULL OR referenced_at < now() - $3::interval) "
            "AND ($4::timestamptz IS NULL OR clock_timestamp() < $4) RETURNING upload_id, size",
            namespace,
            digest,
            grace,
            before,
        )
        if row is None:
            return None
        await conn.execute("UPDATE blob_usage SET bytes = bytes - $2 WHERE namespace = $1", namespace, row["size"])
        shared = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM blobs WHERE upload_id = $1)", row["upload_id"])
    # After the commit: had the delete rolled back, a row would name a missing object. Under the lock, no
    # other row pointed at the upload, and a later upload of these bytes can only reuse an upload a row names.
    if not shared:
        await store.delete(blobs.object_key(row["upload_id"]))
    return Collected(digest, int(row["size"]), not shared)


async def purge(storage: Storage, store: ObjectStore, namespace: str) -> int:
    """Delete every blob of ``namespace`` now, whatever names it (its project is gone, and a project created
    later under the same name must not read them by digest); returns how many rows went."""
    async with storage._connection() as conn:
        digests = [r["digest"] for r in await conn.fetch("SELECT digest FROM blobs WHERE namespace = $1", namespace)]
    gone = 0
    for digest in digests:
        if await collect(storage, store, namespace, digest, None) is not None:
            gone += 1
    return gone


async def sweep(storage: Storage, store: ObjectStore, older_than: datetime, batch: int = 1000) -> int:
    """Delete the objects under ``uploads/`` written before ``older_than`` that no row names; returns how
    many. An upload registers its object within moments of writing it, so ``older_than`` a grace period
    ago cannot catch one in flight (on S3 an object's time is when its upload began: the grace period must
    be longer than the longest upload)."""
    deleted = 0
    pending: dict[uuid.UUID, str] = {}

    async def flush() -> int:
        async with storage._connection() as conn:
            rows = await conn.fetch(
                "SELECT DISTINCT upload_id FROM blobs WHERE upload_id = ANY($1::uuid[])", list(pending)
            )
        named = {r["upload_id"] for r in rows}
        orphaned = [key for upload, key in pending.items() if upload not in named]
        for key in orphaned:
            await store.delete(key)
        pending.clear()
        return len(orphaned)

    async for found in store.list(_UPLOADS):
        if found.modified >= older_than:
            continue
        try:
            upload = uuid.UUID(found.key.removeprefix(_UPLOADS))
        except ValueError:
            continue  # not an object blobs.put wrote
        pending[upload] = found.key
        if len(pending) >= batch:
            deleted += await flush()
    if pending:
        deleted += await flush()
    return deleted
