"""The graph the node authorizer reads: which Attempts are bound to a node, and what a manifest names.

Every request of a node agent that is not decided by the node's name alone asks for the Attempts
bound to the node (one indexed query on the ``labels`` column). Agents make bursts of such requests
(a restore fetches hundreds of chunks), so answers are kept for :data:`ATTEMPTS_TTL` seconds; the
node authorizer asks again with ``fresh=True`` before it refuses anything, so the cache can delay a
revocation by that long but never refuses an Attempt bound a moment ago.

A checkpoint manifest's chunk list is read from the blob store once and kept (a blob never changes);
at most :data:`MANIFESTS_KEPT` manifests are kept, and a manifest larger than
:data:`MAX_MANIFEST_BYTES` names nothing (the agent refuses larger ones too).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import orjson

from nodus.storage import blobs
from nodus.storage.objects import Storage
from nodus.storage.objectstore import ObjectStore

Object = dict[str, Any]
ATTEMPTS_TTL = 1.0
MANIFESTS_KEPT = 256
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
NODE_LABEL = "nodus.dev/node"


class StoredNodeGraph:
    """:class:`~nodus.api.auth.nodes.NodeGraph` over the API server's storage and blob store."""

    def __init__(self, storage: Storage, blob_store: ObjectStore | None) -> None:
        self._storage = storage
        self._blob_store = blob_store
        self._attempts: dict[str, tuple[float, list[Object]]] = {}
        self._manifests: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()

    async def attempts_on(self, node: str, fresh: bool = False) -> list[Object]:
        cached = self._attempts.get(node)
        clock = time.monotonic()
        if not fresh and cached is not None and clock - cached[0] < ATTEMPTS_TTL:
            return cached[1]
        attempts = await self._storage.labelled("Attempt", {NODE_LABEL: node})
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
        while len(self._manifests) > MANIFESTS_KEPT:
            self._manifests.popitem(last=False)
        return chunks

    async def _read_chunks(self, namespace: str, digest: str) -> frozenset[str]:
        if self._blob_store is None:
            return frozenset()
        info = await blobs.open(self._storage, namespace, digest)
        if info is None or info.size > MAX_MANIFEST_BYTES:
            return frozenset()
        body = bytearray()
        async for piece in blobs.read(self._blob_store, info):
            body += piece
        try:
            document = orjson.loads(bytes(body))
        except orjson.JSONDecodeError:
            return frozenset()
        if not isinstance(document, dict) or document.get("kind") != "CheckpointManifest":
            return frozenset()
        found: set[str] = set()
        for entry in document.get("entries") or []:
            if isinstance(entry, dict):
                found.update(str(c) for c in entry.get("chunks") or [] if isinstance(c, str))
        return frozenset(found)
