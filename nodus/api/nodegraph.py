"""The graph the node authorizer reads: which Attempts are bound to a node, and what a manifest names.

Every request of a node agent that is not decided by the node's name alone asks for the Attempts
bound to the node (one indexed query on the ``labels`` column). Agents make bursts of such requests
(a restore fetches hundreds of chunks), so answers are kept for :data:`ATTEMPTS_TTL` seconds; the
node authorizer asks again with ``fresh=True`` before it refuses anything, so the cache can delay a
revocation by that long but never refuses an Attempt bound a moment ago.

A checkpoint manifest's chunk list is read from the blob store once, scanned as it streams (never held
whole), and kept (a blob never changes); the cache holds at most :data:`CHUNKS_KEPT` chunk digests in
all, and a manifest larger than a manifest can be names nothing (the agent refuses larger ones too).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from nodus.apis.v1 import labels
from nodus.storage import blobcollection, blobs
from nodus.storage.objects import Storage
from nodus.storage.objectstore import ObjectStore

Object = dict[str, Any]
ATTEMPTS_TTL = 1.0
CHUNKS_KEPT = 1_000_000
"""About 100 MB of digests at most; a 1 TiB checkpoint in 4 MiB chunks names 262,144."""


class StoredNodeGraph:
    """:class:`~nodus.api.auth.nodes.NodeGraph` over the API server's storage and blob store."""

    def __init__(self, storage: Storage, blob_store: ObjectStore | None) -> None:
        self._storage = storage
        self._blob_store = blob_store
        self._attempts: dict[str, tuple[float, list[Object]]] = {}
        self._manifests: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
        self._chunks_kept = 0

    async def attempts_on(self, node: str, fresh: bool = False) -> list[Object]:
        cached = self._attempts.get(node)
        clock = time.monotonic()
        if not fresh and cached is not None and clock - cached[0] < ATTEMPTS_TTL:
            return cached[1]
        attempts = await self._storage.labelled("Attempt", {labels.NODE: node})
        self._attempts[node] = (clock, attempts)
        if len(self._attempts) > 4096:  # a bound against node names that come and go
            self._attempts.clear()
        return attempts

    async def manifest_chunks(self, namespace: str, digest: str) -> frozenset[str]:
        key = (namespace, digest)
        if key in self._manifests:
            self._manifests.move_to_end(key)
            return self._manifests[key]
        chunks = await self._read_chunks(namespace, digest)
        self._manifests[key] = chunks
        self._chunks_kept += len(chunks)
        while self._chunks_kept > CHUNKS_KEPT and len(self._manifests) > 1:
            _, dropped = self._manifests.popitem(last=False)
            self._chunks_kept -= len(dropped)
        return chunks

    async def _read_chunks(self, namespace: str, digest: str) -> frozenset[str]:
        if self._blob_store is None:
            return frozenset()
        info = await blobs.open(self._storage, namespace, digest)
        if info is None:
            return frozenset()
        return await blobcollection.read_manifest(self._blob_store, info) or frozenset()
