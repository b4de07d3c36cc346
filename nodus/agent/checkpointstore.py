"""Checkpoints on the API server: a mirror's chunks and manifest uploaded as blobs, restored by digest.

The blob store of the project is content-addressed (``POST .../blobs?digest=sha256:<hex>``), so a
chunk is stored once however many checkpoints name it, and the server refuses bytes that do not hash
to the digest they are sent under. Guarantees:

* **Commit point.** :meth:`CheckpointStore.upload` sends the manifest last, after every chunk it
  names was stored. A manifest on the server therefore always has all its chunks, and an upload cut
  short (a failure, the node lost) leaves only chunks, which no manifest names: that checkpoint can
  never be restored, and the one before it is still the latest a caller committed.
* **Incremental.** :attr:`CheckpointStore.known` holds the digests stored by this store's uploads and
  restores (an attempt's previous checkpoints, or the one it was restored from); those chunks are not
  sent again. With ``probe`` (the default) chunks not known are first asked for with ``HEAD`` while
  that pays: the first :data:`PROBE_SAMPLE` of an upload, then only while at least half of those
  asked were found. A store that lost what it knew (a restarted agent), or bytes another index
  already saved, are then found rather than sent again (``bench/checkpoints.py``: 1 GiB
  re-checkpointed in 1 s instead of 10 s), while an upload of new bytes asks only a few times: on
  loopback a ``HEAD`` per chunk cost nothing measurable, but over a real network each one is a
  round trip per 4 MiB.
* **Bounded memory.** At most ``concurrency`` chunks are in flight, each read from the mirror (or
  received from the server) whole: ``concurrency`` times ``CHUNK_SIZE`` bytes.
* **Verified restore.** :meth:`CheckpointStore.restore` checks the manifest's bytes against the digest
  it is restored by, and every chunk against its digest as it arrives; it builds the new trees beside
  the roots and swaps them in only when every chunk arrived intact (:class:`restoring.Restoration`), so
  a failed restore leaves the roots as they were.

Every failure is a :class:`CheckpointFailed` whose message says what failed, fit for an Attempt's status.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from nodus.agent import hostfiles, restoring
from nodus.agent.manifests import Manifest, ManifestInvalid, merge
from nodus.agent.restoring import RestoreFailed
from nodus.agent.snapshots import Mirror
from nodus.client import Client, errors, rest

CHUNK_MEDIA_TYPE = "application/vnd.nodus.checkpoint.chunk"
MANIFEST_MEDIA_TYPE = "application/vnd.nodus.checkpoint.manifest+json"
PROBE_SAMPLE = 8
"""Chunks of an upload asked for with ``HEAD`` before the share found decides whether to go on asking."""
MAX_MANIFEST_SIZE = 256 * 1024 * 1024
"""A larger manifest is refused on restore (a TiB in 4 MiB chunks is a manifest of about 20 MB)."""


class CheckpointFailed(Exception):
    """Saving or restoring a checkpoint failed; the message says what, for the Attempt's status."""


@dataclass(frozen=True)
class Uploaded:
    """One committed checkpoint: its manifest's digest (the checkpoint's name) and what it cost."""

    digest: str
    size: int
    """Bytes of the manifest."""
    logical_size: int
    """Bytes of the files it saves."""
    chunk_bytes: int
    """Bytes of the chunks sent (new to the server, as far as this store knew)."""
    chunks_uploaded: int
    chunks_present: int
    """Chunks not known here that the server already had (found by ``HEAD``, not sent)."""
    chunks_total: int
    """Distinct chunks the manifest names."""

    @property
    def uploaded_bytes(self) -> int:
        """Every byte sent: the new chunks and the manifest."""
        return self.chunk_bytes + self.size


class CheckpointStore:
    """Uploads and restores the checkpoints of one attempt in project ``namespace``.

    Not safe for two uploads at once (they share :attr:`known` and the mirror): the caller takes
    one checkpoint at a time.
    """

    def __init__(self, client: Client, namespace: str, *, concurrency: int = 4, probe: bool = True) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.namespace = namespace
        self.concurrency = concurrency
        self.probe = probe
        self.known: set[str] = set()
        """Chunk digests known to be stored in the project; seed it with a previous manifest's digests."""

    def blob_path(self, digest: str) -> str:
        return f"{rest.path('blobs', self.namespace)}/{digest}"

    async def upload(self, manifest: Manifest, mirror: Mirror) -> Uploaded:
        """Store every chunk of ``manifest`` the server lacks, reading it from ``mirror`` (whose latest
        manifest it must be), then the manifest itself; returns what was committed."""
        body = manifest.to_bytes()
        digest = _digest(body)
        wanted = manifest.digests()
        sent: list[int] = []
        present: list[str] = []
        asked = 0

        async def store(chunk: str) -> None:
            nonlocal asked
            probing = self.probe and (asked < PROBE_SAMPLE or 2 * len(present) >= asked)
            asked += probing
            if probing and await self._exists(chunk):
                present.append(chunk)
            else:
                try:
                    data = await asyncio.to_thread(mirror.chunk_reader(chunk).read)
                except (KeyError, OSError) as exc:
                    raise CheckpointFailed(f"reading chunk {chunk} from the mirror failed: {exc}") from None
                await self._put(data, CHUNK_MEDIA_TYPE, chunk, f"chunk {chunk}")
                sent.append(len(data))
            self.known.add(chunk)

        where = f"checkpoint {manifest.seq}"
        try:
            await self._each(sorted(wanted - self.known), store)
            try:
                await self.client.upload_blob(self.namespace, body, MANIFEST_MEDIA_TYPE, digest=digest)
            except errors.Invalid:
                # The server refuses a manifest naming chunks the project no longer holds: chunks this attempt
                # sent long ago and nothing named since were collected (ADR 0034). Forget what it knew, send
                # what is missing, and try once more.
                self.known.clear()
                await self._each(sorted(wanted), store)
                await self._put(body, MANIFEST_MEDIA_TYPE, digest, f"the manifest {digest}")
            except (errors.APIError, httpx.HTTPError) as exc:
                raise CheckpointFailed(
                    f"uploading the manifest {digest} ({len(body)} bytes) failed: {_describe(exc)}"
                ) from None
        except CheckpointFailed as exc:
            raise CheckpointFailed(f"{where}: {exc}") from None
        return Uploaded(
            digest=digest,
            size=len(body),
            logical_size=manifest.size,
            chunk_bytes=sum(sent),
            chunks_uploaded=len(sent),
            chunks_present=len(present),
            chunks_total=len(wanted),
        )

    async def restore(
        self, manifest_digest: str | Sequence[str], roots: Mapping[str, Path | hostfiles.Location], mirror: Mirror
    ) -> Manifest:
        """Make ``roots`` (the mirror's) exactly checkpoint ``manifest_digest``, then seed the mirror and
        :attr:`known` with it, so that the next checkpoint sends only what changed. All or nothing: on
        :class:`CheckpointFailed` the roots are as they were. Several digests (a gang checkpoint's shards)
        are restored as one tree, a later shard's file winning a path two hold (``manifests.merge``)."""
        if dict(roots) != mirror.roots:
            raise ValueError("restore into the mirror's roots, so that the mirror learns what was restored")
        digests = [manifest_digest] if isinstance(manifest_digest, str) else list(manifest_digest)
        where = f"restoring checkpoint {', '.join(digests)}"
        parts = []
        for digest in digests:
            body = await self._get(digest, MAX_MANIFEST_SIZE, "its manifest", where)
            if (actual := _digest(body)) != digest:
                raise CheckpointFailed(f"{where}: the manifest's bytes hash to {actual}: damaged in the store")
            try:
                parts.append(Manifest.from_bytes(body))
            except ManifestInvalid as exc:
                raise CheckpointFailed(f"{where}: {exc}") from None
        try:
            manifest = parts[0] if len(parts) == 1 else merge(parts)
            restoration = await asyncio.to_thread(restoring.Restoration, manifest, roots)
        except (ManifestInvalid, RestoreFailed, OSError) as exc:
            raise CheckpointFailed(f"{where}: {exc}") from None

        async def fetch(chunk: str) -> None:
            data = await self._get(chunk, manifest.chunk_size, f"chunk {chunk}", where)
            await asyncio.to_thread(restoration.write, chunk, data)

        try:
            await self._each(restoration.needed(), fetch)
            await asyncio.to_thread(restoration.commit)
        except (RestoreFailed, OSError) as exc:
            raise CheckpointFailed(f"{where}: {exc}") from None
        finally:
            await asyncio.to_thread(restoration.abort)  # a no-op after the commit
        try:
            await asyncio.to_thread(mirror.seed, manifest)
        except OSError as exc:
            raise CheckpointFailed(f"{where}: restored, but copying it into the mirror failed: {exc}") from None
        self.known |= manifest.digests()
        return manifest

    async def _each(self, items: list[str], action: Callable[[str], Awaitable[None]]) -> None:
        """``action`` on every item, ``concurrency`` at a time; the first failure cancels the rest."""
        pending = iter(items)

        async def worker() -> None:
            for item in pending:  # shared: each worker takes the next item
                await action(item)

        workers = [asyncio.create_task(worker()) for _ in range(min(self.concurrency, len(items)))]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _exists(self, digest: str) -> bool:
        try:
            await self.client.request("HEAD", self.blob_path(digest))
        except errors.NotFound:
            return False
        except (errors.APIError, httpx.HTTPError) as exc:
            raise CheckpointFailed(f"asking for chunk {digest} failed: {_describe(exc)}") from None
        return True

    async def _put(self, data: bytes, media_type: str, digest: str, what: str) -> None:
        try:
            await self.client.upload_blob(self.namespace, data, media_type, digest=digest)
        except (errors.APIError, httpx.HTTPError) as exc:
            raise CheckpointFailed(f"uploading {what} ({len(data)} bytes) failed: {_describe(exc)}") from None

    async def _get(self, digest: str, limit: int, what: str, where: str) -> bytes:
        """The bytes of blob ``digest``, at most ``limit`` of them."""
        pieces: list[bytes] = []
        size = 0
        try:
            async with self.client.open_download(self.blob_path(digest)) as response:
                async for piece in response.aiter_bytes():
                    size += len(piece)
                    if size > limit:
                        raise CheckpointFailed(f"{where}: {what} is larger than {limit} bytes")
                    pieces.append(piece)
        except errors.NotFound:
            hint = ": it was never committed (an upload cut short) or was deleted" if what == "its manifest" else ""
            raise CheckpointFailed(f"{where}: {what} is not in project {self.namespace}{hint}") from None
        except (errors.APIError, httpx.HTTPError) as exc:
            raise CheckpointFailed(f"{where}: downloading {what} failed: {_describe(exc)}") from None
        return b"".join(pieces)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, errors.APIError) else f"{type(exc).__name__}: {exc}"
