"""Where the bytes of blobs live: an object store, the filesystem by default or S3 in production.

PostgreSQL keeps what names the bytes (``blobs``: project, digest, size, media type, object key,
see ``nodus.storage.blobs``); the bytes themselves go to an :class:`ObjectStore`, because a database
pays a WAL and TOAST write for every byte (measured in docs/benchmarks.md §5) and an object store
does not. Two implementations, chosen by ``--blob-store URL`` (:func:`open_store`):

* ``file:///var/lib/nodus/blobs`` (or a plain path): :class:`FilesystemStore`. An object is written
  to a temporary file in the store and renamed into place once complete and flushed, so a reader
  never sees a partial object and a crash leaves only a temporary file (removed by a start an hour later).
  One API server, or several sharing the directory (NFS): the rename is atomic on one filesystem.
* ``s3://bucket/prefix?endpoint=https://...&region=...``: :class:`S3Store` (boto3; credentials
  from the standard AWS chain: environment, profile, instance role). An object is a multipart
  upload completed only when every part is in, aborted otherwise.

Both stream: ``put`` consumes an async iterator of chunks and ``get`` yields chunks, never more than
one part (8 MiB for S3, 1 MiB on the filesystem) in memory. Blocking calls run in worker threads.
Keys are relative paths of ``[A-Za-z0-9._/-]`` without ``..``. ``list`` names the objects under a
prefix with the time each was last written, for the sweep of objects no blob names (ADR 0034).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from stat import S_ISREG
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

READ_BYTES = 1 << 20
S3_PART_BYTES = 8 << 20  # S3 wants parts of at least 5 MiB, except the last
_KEY = re.compile(r"^(?!.*\.\.)[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
_PARTIAL = ".partial"
_STALE_PARTIAL_SECONDS = 3600


@dataclass(frozen=True)
class StoredObject:
    """An object as :meth:`ObjectStore.list` names it: its key and when it was written (UTC). On the
    filesystem that is when its last byte was written; on S3, when its (multipart) upload began."""

    key: str
    modified: datetime


class ObjectStore(Protocol):
    """An object store of immutable objects under string keys."""

    description: str
    """Where the objects are, for logs and errors (no credentials)."""

    async def put(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        """Store the bytes of ``chunks`` under ``key``; returns the size. The object appears whole or
        not at all: if ``chunks`` or the store fails, nothing is left under ``key``."""
        ...

    def get(self, key: str, start: int = 0) -> AsyncIterator[bytes]:
        """The object's bytes from offset ``start``; FileNotFoundError when there is no such object."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the object; a missing object is not an error."""
        ...

    def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        """Every complete object whose key starts with ``prefix`` (a directory such as ``uploads/``), in no
        particular order. Objects being written are not listed (they are not complete yet)."""
        ...


def check_key(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"object key {key!r} is not a relative path of letters, digits, '.', '_', '-' and '/'")
    return key


def open_store(url: str) -> ObjectStore:
    """The store named by ``url``: ``file:///dir``, a plain directory path, or ``s3://bucket/prefix?...``."""
    parts = urlsplit(url)
    if parts.scheme == "s3":
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return S3Store(parts.netloc, parts.path.strip("/"), endpoint=query.get("endpoint"), region=query.get("region"))
    if parts.scheme in ("", "file"):
        return FilesystemStore(Path(parts.path if parts.scheme == "file" else url))
    raise ValueError(f"--blob-store {url!r}: use file:///a/directory, a directory path, or s3://bucket/prefix")


class FilesystemStore:
    """Objects as files under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root.absolute()
        self.description = f"file://{self.root}"
        (self.root / _PARTIAL).mkdir(parents=True, exist_ok=True)
        # Temporary files of uploads cut short by a crash: nothing will finish them. Only those untouched for
        # an hour: API servers sharing the directory may be writing the others (an upload writes every moment).
        stale = time.time() - _STALE_PARTIAL_SECONDS
        for leftover in (self.root / _PARTIAL).iterdir():
            with contextlib.suppress(OSError):
                if leftover.stat().st_mtime < stale:
                    leftover.unlink()

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    async def put(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        target = self._path(key)
        partial = self.root / _PARTIAL / uuid.uuid4().hex
        size = 0
        handle = await asyncio.to_thread(partial.open, "wb")
        try:
            async for chunk in chunks:
                await asyncio.to_thread(handle.write, chunk)
                size += len(chunk)
            await asyncio.to_thread(_flush, handle)
            handle.close()
            await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
            await asyncio.to_thread(os.replace, partial, target)
        except BaseException:
            handle.close()
            partial.unlink(missing_ok=True)
            raise
        return size

    async def get(self, key: str, start: int = 0) -> AsyncIterator[bytes]:
        handle = await asyncio.to_thread(self._path(key).open, "rb")
        try:
            if start:
                handle.seek(start)
            while chunk := await asyncio.to_thread(handle.read, READ_BYTES):
                yield chunk
        finally:
            handle.close()

    async def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self._path(key).unlink)

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        for found in await asyncio.to_thread(_files_under, self._path(prefix.rstrip("/")), self.root):
            yield found


def _files_under(directory: Path, root: Path) -> list[StoredObject]:
    """The regular files under ``directory`` as objects keyed relative to ``root`` (a temporary file of an
    upload in flight is under ``.partial``, never here)."""
    found = []
    for path in directory.rglob("*") if directory.is_dir() else ():
        with contextlib.suppress(FileNotFoundError):  # removed while listing
            if S_ISREG((stat := path.lstat()).st_mode):
                found.append(
                    StoredObject(path.relative_to(root).as_posix(), datetime.fromtimestamp(stat.st_mtime, UTC))
                )
    return found


def _flush(handle: Any) -> None:
    handle.flush()
    os.fsync(handle.fileno())


class S3Store:
    """Objects in an S3 bucket under a prefix (see the module docstring)."""

    def __init__(
        self, bucket: str, prefix: str = "", *, endpoint: str | None = None, region: str | None = None
    ) -> None:
        import boto3  # imported here: only an S3-backed server needs it loaded

        if not bucket:
            raise ValueError("s3:// blob store URL without a bucket: use s3://bucket/prefix")
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.description = f"s3://{bucket}/{self.prefix}" + (f" at {endpoint}" if endpoint else "")
        self._client = boto3.client("s3", endpoint_url=endpoint, region_name=region)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{check_key(key)}" if self.prefix else check_key(key)

    async def put(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        name = self._key(key)
        created = await asyncio.to_thread(self._client.create_multipart_upload, Bucket=self.bucket, Key=name)
        upload_id = created["UploadId"]
        parts: list[dict[str, Any]] = []
        size = 0
        buffer = bytearray()
        try:
            async for chunk in chunks:
                buffer += chunk
                size += len(chunk)
                while len(buffer) >= S3_PART_BYTES:
                    parts.append(await self._part(name, upload_id, len(parts) + 1, bytes(buffer[:S3_PART_BYTES])))
                    del buffer[:S3_PART_BYTES]
            if buffer or not parts:
                parts.append(await self._part(name, upload_id, len(parts) + 1, bytes(buffer)))
            await asyncio.to_thread(
                self._client.complete_multipart_upload,
                Bucket=self.bucket,
                Key=name,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    asyncio.to_thread(
                        self._client.abort_multipart_upload, Bucket=self.bucket, Key=name, UploadId=upload_id
                    )
                )
            raise
        return size

    async def _part(self, name: str, upload_id: str, number: int, data: bytes) -> dict[str, Any]:
        answer = await asyncio.to_thread(
            self._client.upload_part, Bucket=self.bucket, Key=name, UploadId=upload_id, PartNumber=number, Body=data
        )
        return {"PartNumber": number, "ETag": answer["ETag"]}

    async def get(self, key: str, start: int = 0) -> AsyncIterator[bytes]:
        arguments: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(key)}
        if start:
            arguments["Range"] = f"bytes={start}-"
        try:
            answer = await asyncio.to_thread(self._client.get_object, **arguments)
        except self._client.exceptions.NoSuchKey:
            raise FileNotFoundError(f"{self.description}: no object {key}") from None
        body = answer["Body"]
        try:
            while chunk := await asyncio.to_thread(body.read, READ_BYTES):
                yield chunk
        finally:
            body.close()

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._client.delete_object, Bucket=self.bucket, Key=self._key(key))

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        # Only completed uploads are objects: an upload in flight is a multipart upload, never listed here.
        base = f"{self.prefix}/" if self.prefix else ""
        arguments: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base + check_key(prefix.rstrip("/")) + "/"}
        while True:
            page = await asyncio.to_thread(self._client.list_objects_v2, **arguments)
            for item in page.get("Contents") or []:
                yield StoredObject(str(item["Key"]).removeprefix(base), item["LastModified"].astimezone(UTC))
            if not page.get("IsTruncated"):
                return
            arguments["ContinuationToken"] = page["NextContinuationToken"]
