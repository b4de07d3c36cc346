"""Checkpoint snapshots on the agent's disk: the manifest format, the mirror, and restoring.

A checkpoint saves ``spec.recovery.checkpoint.paths`` (the *roots*, such as ``/nodus/state``) together.
It is stored as content-addressed chunks plus one manifest that names them:

* **Chunks.** A regular file is cut at every :data:`CHUNK_SIZE` bytes; each piece is a blob named by
  its digest, ``sha256:<hex>`` (an empty file has no chunk). Fixed-size chunks make the next
  checkpoint cheap when a program rewrites part of a file in place (a shard, optimizer state): only
  the chunks whose bytes changed are new. Bytes inserted in the middle of a file shift every later
  chunk, which then uploads again; checkpoint writers rewrite or replace files, they rarely insert.
* **The manifest** (:class:`Manifest`) lists every directory, file (mode, size, chunk digests) and
  symbolic link (target, stored as-is) by the path the program sees, as canonical JSON of
  ``kind: CheckpointManifest``. Its sha256 names the checkpoint. :meth:`Manifest.from_bytes` refuses
  anything a restore could be tricked by (:class:`ManifestInvalid`).

**The mirror** (:class:`Mirror`) is an agent-owned copy of the roots kept between the checkpoints of
one attempt. :meth:`Mirror.stage` is what the program waits for (frozen, or having promised not to
write): a walk, then a copy of only the files whose (device, inode, size, mtime, ctime) changed since
the last stage, as fast as the kernel copies (``copy_file_range``), with no hashing. Once it returns
the program may go on; :meth:`Mirror.manifest` then hashes the mirror's copies, never the live files,
re-hashing only files copied since the last manifest, and :meth:`Mirror.chunk_reader` serves one
chunk at a time to the uploader. The mirror's bookkeeping lives in memory: a new :class:`Mirror`
(an agent restart) starts empty and copies and hashes everything once.

**Restoring** (:class:`Restoration`, :func:`restore_into`) builds each root's new tree in a
temporary sibling of the root, writing chunks as they arrive after checking their sha256, and only
when every chunk has arrived swaps the siblings in (rename the old root aside, rename the new one
in, delete the old). A damaged or missing chunk therefore leaves the roots exactly as they were and
no sibling behind. After a swap the roots hold exactly the checkpoint: whatever else was in them is
gone. :meth:`Mirror.seed` then teaches the mirror the restored files, so that the first checkpoint
after a restore copies and uploads only what changed since.

**Safety.** The roots belong to the program, which runs as the agent's user but sees only its
sandbox; it must not get the agent to read or write a host path outside the roots. So the walk and
the copies open every directory and file relative to its parent's descriptor with ``O_NOFOLLOW``
(a directory swapped for a symbolic link mid-walk is skipped, never followed), symbolic links are
recorded and recreated but never followed, and a manifest whose entries are not under its roots, or
whose entries are not all inside directory entries (no file "inside" a symbolic link), is refused.
The host paths of the roots themselves are the caller's, and trusted. Modes are kept, except
set-user-ID and set-group-ID bits, which a restore drops; modification times and owners are not kept.

Everything here is blocking filesystem work: call it from a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast

import orjson

CHUNK_SIZE = 4 * 1024 * 1024
API_VERSION = "nodus.dev/v1"
KIND = "CheckpointManifest"
MAX_CHUNK_SIZE = 64 * 1024 * 1024
"""The largest ``chunkSize`` a manifest may declare: a restore holds a few chunks in memory at once."""

EntryType = Literal["file", "dir", "symlink"]
Format = Literal["Snapshot", "Dcp"]
_FORMATS = ("Snapshot", "Dcp")
_TYPES = ("file", "dir", "symlink")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a file swapped for a fifo between the walk and the copy must not hang the agent.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_RESTORED_MODE_BITS = 0o1777  # no set-user-ID or set-group-ID bits from a checkpoint
_HASHERS = min(4, os.cpu_count() or 1)  # sha256 releases the GIL: chunks hash in parallel


class ManifestInvalid(Exception):
    """A manifest is malformed or unsafe; the message names the field and what is wrong with it."""


class TooLarge(Exception):
    """The roots hold more than the checkpoint may (``spec.recovery.checkpoint.maxSize``)."""

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"the checkpoint paths hold {size} bytes, more than the maximum of {max_size} bytes")
        self.size = size
        self.max_size = max_size


class RestoreFailed(Exception):
    """A restore could not complete: a chunk is damaged or missing, or the disk refused a write."""


# --- the manifest ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One directory, regular file or symbolic link of a checkpoint, by the path the program sees.

    ``size`` and ``chunks`` are for files (``chunks`` empty until the mirror hashed them), ``target``
    for symbolic links; ``mode`` is the permission bits (``0o644``)."""

    path: str
    type: EntryType
    mode: int
    size: int = 0
    chunks: tuple[str, ...] = ()
    target: str = ""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"path": self.path, "type": self.type, "mode": self.mode}
        if self.type == "file":
            body.update(size=self.size, chunks=list(self.chunks))
        elif self.type == "symlink":
            body["target"] = self.target
        return body


@dataclass
class Manifest:
    """What one checkpoint holds. ``entries`` are sorted by path component by component, so a
    directory comes before what it contains; ``labels`` (job, index, attempt) are the caller's."""

    format: Format
    seq: int
    paths: list[str]
    chunk_size: int
    entries: list[Entry]
    created: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """The bytes of every file: what the program saved, before deduplication."""
        return sum(entry.size for entry in self.entries if entry.type == "file")

    def digests(self) -> set[str]:
        """Every chunk the manifest names, each once."""
        return {digest for entry in self.entries for digest in entry.chunks}

    def to_bytes(self) -> bytes:
        """Canonical JSON (sorted keys, no spaces): equal manifests give equal bytes, hence equal digests."""
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "format": self.format,
            "seq": self.seq,
            "paths": list(self.paths),
            "chunkSize": self.chunk_size,
            "created": self.created,
            "labels": dict(self.labels),
            "entries": [entry.to_json() for entry in self.entries],
        }
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and :meth:`check` a manifest; :class:`ManifestInvalid` for anything malformed. Unknown
        fields are ignored (a newer agent may add some); missing or mistyped ones are not."""
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ManifestInvalid(f"not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ManifestInvalid("not a JSON object")
        if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
            raise ManifestInvalid(
                f"apiVersion and kind must be {API_VERSION} and {KIND}, got {body.get('apiVersion')!r} and "
                f"{body.get('kind')!r}"
            )
        if body.get("format") not in _FORMATS:
            raise ManifestInvalid(f"format must be Snapshot or Dcp, got {body.get('format')!r}")
        paths, entries, labels = body.get("paths"), body.get("entries"), body.get("labels", {})
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ManifestInvalid("paths must be a list of strings")
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ManifestInvalid("entries must be a list of objects")
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ManifestInvalid("labels must map strings to strings")
        manifest = cls(
            format=cast(Format, body["format"]),
            seq=_integer(body, "seq", "seq"),
            paths=list(paths),
            chunk_size=_integer(body, "chunkSize", "chunkSize"),
            entries=[_entry(item, f"entries[{n}]") for n, item in enumerate(entries)],
            created=_string(body, "created", "created"),
            labels=dict(labels),
        )
        manifest.check()
        return manifest

    def check(self) -> None:
        """Raise :class:`ManifestInvalid` unless every path is normalised and under one root, entries are
        sorted without duplicates, every entry but a root is inside a directory entry, digests are
        well-formed and every file has one chunk per ``chunk_size`` bytes."""
        if self.seq < 0:
            raise ManifestInvalid(f"seq must be >= 0, got {self.seq}")
        if not 0 < self.chunk_size <= MAX_CHUNK_SIZE:
            raise ManifestInvalid(f"chunkSize must be 1 to {MAX_CHUNK_SIZE}, got {self.chunk_size}")
        try:
            datetime.fromisoformat(self.created)
        except ValueError:
            raise ManifestInvalid(f"created must be an RFC 3339 time, got {self.created!r}") from None
        check_roots(self.paths, ManifestInvalid)
        directories: set[str] = set()
        previous: list[str] | None = None
        for n, entry in enumerate(self.entries):
            where = f"entries[{n}] ({entry.path!r})"
            _check_path(entry.path, where, ManifestInvalid)
            if root_of(entry.path, self.paths) is None:
                raise ManifestInvalid(f"{where}: not under any of the paths {self.paths}")
            key = entry.path.split("/")
            if previous is not None and key <= previous:
                raise ManifestInvalid(f"{where}: entries must be sorted by path, without duplicates")
            previous = key
            if entry.path not in self.paths and entry.path.rpartition("/")[0] not in directories:
                raise ManifestInvalid(f"{where}: its parent is not a directory entry of the manifest")
            _check_entry(entry, where, self.chunk_size)
            if entry.type == "dir":
                directories.add(entry.path)


def check_roots(paths: list[str] | tuple[str, ...], error: type[Exception]) -> None:
    """Roots must be normalised absolute paths (not ``/``), without duplicates, none inside another."""
    if not paths:
        raise error("paths must name at least one path")
    for path in paths:
        _check_path(path, f"path {path!r}", error)
        if path == "/":
            raise error("path '/' cannot be checkpointed: name the directories to save")
        if root_of(path, [other for other in paths if other != path]) is not None or paths.count(path) > 1:
            raise error(f"path {path!r} is repeated or inside another path of the checkpoint")


def root_of(path: str, roots: list[str] | tuple[str, ...]) -> str | None:
    """The root that ``path`` is, or is under; None if it is under none of them."""
    for root in roots:
        if path == root or path.startswith(root + "/"):
            return root
    return None


def _check_path(path: str, where: str, error: type[Exception]) -> None:
    parts = path.split("/")
    if not path.startswith("/") or "\0" in path or (path != "/" and any(p in ("", ".", "..") for p in parts[1:])):
        raise error(f"{where}: must be an absolute, normalised path without '.' or '..' components")


def _check_entry(entry: Entry, where: str, chunk_size: int) -> None:
    if entry.type not in _TYPES:
        raise ManifestInvalid(f"{where}: type must be file, dir or symlink, got {entry.type!r}")
    if not 0 <= entry.mode <= 0o7777:
        raise ManifestInvalid(f"{where}: mode must be permission bits (0 to 0o7777), got {entry.mode}")
    if entry.type == "symlink" and (not entry.target or "\0" in entry.target):
        raise ManifestInvalid(f"{where}: a symlink needs a target")
    if entry.type != "file":
        return
    if entry.size < 0:
        raise ManifestInvalid(f"{where}: size must be >= 0, got {entry.size}")
    for digest in entry.chunks:
        if not _DIGEST.fullmatch(digest):
            raise ManifestInvalid(f"{where}: chunk {digest!r} is not sha256:<64 lower-case hex digits>")
    wanted = -(-entry.size // chunk_size)
    if len(entry.chunks) != wanted:
        raise ManifestInvalid(
            f"{where}: {entry.size} bytes in chunks of {chunk_size} need {wanted} chunks, the entry has "
            f"{len(entry.chunks)}"
        )


def _entry(item: dict[str, Any], where: str) -> Entry:
    kind = item.get("type")
    if kind not in _TYPES:
        raise ManifestInvalid(f"{where}: type must be file, dir or symlink, got {kind!r}")
    chunks = item.get("chunks", []) if kind == "file" else []
    if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
        raise ManifestInvalid(f"{where}: chunks must be a list of digests")
    return Entry(
        path=_string(item, "path", where),
        type=cast(EntryType, kind),
        mode=_integer(item, "mode", where),
        size=_integer(item, "size", where) if kind == "file" else 0,
        chunks=tuple(chunks),
        target=_string(item, "target", where) if kind == "symlink" else "",
    )


def _integer(body: dict[str, Any], key: str, where: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ManifestInvalid(f"{where}: {key} must be an integer, got {value!r}")
    return value


def _string(body: dict[str, Any], key: str, where: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise ManifestInvalid(f"{where}: {key} must be a string, got {value!r}")
    return value


# --- the mirror -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Staged:
    """What one :meth:`Mirror.stage` found and did. ``entries`` have no chunk digests yet; ``skipped``
    says what was left out and why (vanished mid-walk, a fifo or socket, a name that is not UTF-8)."""

    entries: tuple[Entry, ...]
    generation: int
    files: int
    size: int
    copied_files: int
    copied_bytes: int
    removed_files: int
    skipped: tuple[str, ...]


@dataclass(frozen=True)
class ChunkRef:
    """Where a chunk's bytes are in the mirror: ``length`` bytes of ``path`` from ``offset``."""

    path: Path
    offset: int
    length: int

    def read(self) -> bytes:
        """The chunk's bytes (blocking; at most one chunk in memory). OSError if the file is short."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, self.length, self.offset)
        finally:
            os.close(fd)
        if len(data) != self.length:
            raise OSError(errno.EIO, f"{self.path} ends before byte {self.offset + self.length}")
        return data


@dataclass
class _Copy:
    """A file of the roots as the mirror holds it. ``chunks`` (once hashed) are valid while the
    mirror's file still has identity ``held``."""

    name: str
    source: tuple[int, ...]  # (dev, inode, size, mtime_ns, ctime_ns) of the live file when copied
    size: int
    held: tuple[int, ...]  # (inode, size, mtime_ns) of the mirror's file after the copy
    chunks: tuple[str, ...] | None = None


@dataclass(frozen=True)
class _Found:
    """An entry of the walk; for a regular file, where to open it and what it looked like."""

    entry: Entry
    root: str
    parts: tuple[str, ...]
    identity: tuple[int, ...] = ()


class Mirror:
    """The staging copy of the checkpoint roots for one attempt (see the module docstring).

    ``directory`` is the agent's own, out of the program's sight (and on the roots' filesystem, for
    fast copies); its ``files/`` subdirectory is emptied on construction. ``roots`` maps each root as
    the program sees it (``/nodus/state``) to the host directory behind it. One checkpoint at a time:
    do not stage while chunks of the previous manifest are still being read. :meth:`stage`,
    :meth:`manifest` and :meth:`seed` take a lock, so a call whose awaiting task was cancelled (its
    worker thread runs on) finishes before the next one starts.
    """

    def __init__(self, directory: Path, roots: Mapping[str, Path]) -> None:
        check_roots(list(roots), ValueError)
        self.roots = dict(roots)
        self.files = directory / "files"
        shutil.rmtree(self.files, ignore_errors=True)
        self.files.mkdir(parents=True)
        self.hashed = 0
        """Bytes the last :meth:`manifest` hashed (files copied since the manifest before)."""
        self._copies: dict[str, _Copy] = {}
        self._locations: dict[str, ChunkRef] = {}
        self._generation = 0
        self._lock = threading.Lock()

    def stage(self, max_size: int) -> Staged:
        """Bring the mirror up to date with the roots: copy new and changed files, drop vanished ones.

        Raises :class:`TooLarge` after the walk and before any copy when the files add up to more than
        ``max_size`` bytes. A missing root counts as empty. Files that vanish or turn into something
        else during the walk are skipped (listed in ``skipped``), never followed.
        """
        with self._lock:
            return self._stage(max_size)

    def _stage(self, max_size: int) -> Staged:
        found: list[_Found] = []
        skipped: list[str] = []
        for root, host in self.roots.items():
            _scan_root(root, host, found, skipped)
        size = sum(item.entry.size for item in found if item.entry.type == "file")
        if size > max_size:
            raise TooLarge(size, max_size)
        entries: list[Entry] = []
        kept: dict[str, _Copy] = {}
        copied = copied_bytes = 0
        try:
            with _Directories(self.roots) as directories:
                for item in found:
                    entry = item.entry
                    if entry.type == "file":
                        record = self._copies.get(entry.path)
                        if record is None or record.source != item.identity:
                            record = self._copy(item, directories, skipped)
                            if record is None:
                                continue
                            copied, copied_bytes = copied + 1, copied_bytes + record.size
                        kept[entry.path] = record
                        entry = replace(entry, size=record.size)
                    entries.append(entry)
        except BaseException:
            # A full disk, say: every record still describes its copy, so the next stage goes on from here.
            self._copies.update(kept)
            self._generation += 1
            raise
        removed = 0
        for path, record in self._copies.items():
            if path not in kept:  # a re-copied file already replaced its old copy (same name)
                (self.files / record.name).unlink(missing_ok=True)
                removed += 1
        self._copies = kept
        self._generation += 1
        entries.sort(key=lambda e: e.path.split("/"))
        files = sum(1 for e in entries if e.type == "file")
        return Staged(
            entries=tuple(entries),
            generation=self._generation,
            files=files,
            size=sum(e.size for e in entries),
            copied_files=copied,
            copied_bytes=copied_bytes,
            removed_files=removed,
            skipped=tuple(skipped),
        )

    def manifest(
        self, staged: Staged, seq: int, format: Format, created: str, labels: Mapping[str, str] | None = None
    ) -> Manifest:
        """The manifest of ``staged`` (the result of the latest :meth:`stage`; ValueError for an older
        one), hashing the mirror's copies: only files copied since the previous manifest are read."""
        with self._lock:
            return self._manifest(staged, seq, format, created, labels)

    def _manifest(
        self, staged: Staged, seq: int, format: Format, created: str, labels: Mapping[str, str] | None
    ) -> Manifest:
        if staged.generation != self._generation:
            raise ValueError("this Staged is not the mirror's latest: stage again")
        stale = [
            record
            for entry in staged.entries
            if entry.type == "file" and not self._fresh(record := self._copies[entry.path])
        ]
        work = [self._ref(record, index) for record in stale for index in range(_count(record.size))]
        with ThreadPoolExecutor(_HASHERS, thread_name_prefix="nodus-hash") as pool:
            digests = iter(pool.map(_digest, work))  # in order: each file's chunks one after the other
        for record in stale:
            record.chunks = tuple(next(digests) for _ in range(_count(record.size)))
        self.hashed = sum(ref.length for ref in work)
        entries = []
        self._locations = {}
        for staged_entry in staged.entries:
            if staged_entry.type != "file":
                entries.append(staged_entry)
                continue
            record = self._copies[staged_entry.path]
            assert record.chunks is not None
            entries.append(replace(staged_entry, chunks=record.chunks))
            for index, digest in enumerate(record.chunks):
                self._locations.setdefault(digest, self._ref(record, index))
        roots = sorted(self.roots)
        manifest = Manifest(format, seq, roots, CHUNK_SIZE, entries, created, dict(labels or {}))
        manifest.check()
        return manifest

    def chunk_reader(self, digest: str) -> ChunkRef:
        """Where chunk ``digest`` of the latest :meth:`manifest` is; KeyError for any other digest."""
        try:
            return self._locations[digest]
        except KeyError:
            raise KeyError(f"{digest} is not a chunk of the mirror's latest manifest") from None

    def seed(self, manifest: Manifest) -> Staged:
        """After a restore of ``manifest`` into the roots (and before the program changed them): stage
        everything, and take the manifest's digests for the copied files instead of hashing them."""
        with self._lock:
            staged = self._stage(sys.maxsize)
            if manifest.chunk_size == CHUNK_SIZE:
                restored = {entry.path: entry for entry in manifest.entries if entry.type == "file"}
                for path, record in self._copies.items():
                    entry = restored.get(path)
                    if entry is not None and entry.size == record.size:
                        record.chunks = entry.chunks
            return staged

    def _fresh(self, record: _Copy) -> bool:
        if record.chunks is None:
            return False
        try:
            return _held(os.stat(self.files / record.name)) == record.held
        except FileNotFoundError:
            return False

    def _ref(self, record: _Copy, index: int) -> ChunkRef:
        offset = index * CHUNK_SIZE
        return ChunkRef(self.files / record.name, offset, min(CHUNK_SIZE, record.size - offset))

    def _copy(self, item: _Found, directories: _Directories, skipped: list[str]) -> _Copy | None:
        """Copy one live file into the mirror (temporary name, then rename); None if it vanished."""
        path = item.entry.path
        try:
            source = directories.open_file(item.root, item.parts)
        except OSError as exc:
            skipped.append(f"{path}: skipped: {exc.strerror or exc}")
            return None
        name = hashlib.blake2b(path.encode(), digest_size=16).hexdigest()
        partial = self.files / f".{name}.partial"
        try:
            status = os.fstat(source)
            if not stat.S_ISREG(status.st_mode):
                skipped.append(f"{path}: skipped: no longer a regular file")
                return None
            target = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                size = _copy_contents(source, target)
                held = _held(os.fstat(target))
            finally:
                os.close(target)
            os.replace(partial, self.files / name)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        finally:
            os.close(source)
        return _Copy(name, _identity(status), size, held)


def _count(size: int) -> int:
    """How many chunks a file of ``size`` bytes has."""
    return -(-size // CHUNK_SIZE)


def _digest(ref: ChunkRef) -> str:
    return "sha256:" + hashlib.sha256(ref.read()).hexdigest()


def _identity(status: os.stat_result) -> tuple[int, ...]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _held(status: os.stat_result) -> tuple[int, ...]:
    return (status.st_ino, status.st_size, status.st_mtime_ns)


def _scan_root(root: str, host: Path, found: list[_Found], skipped: list[str]) -> None:
    """Add ``root`` and, for a directory, everything under it to ``found`` (symbolic links not followed)."""
    try:
        status = os.lstat(host)
    except FileNotFoundError:
        return
    if not _add(root, root, (), status, lambda: os.readlink(host), found, skipped):
        return
    try:
        fd = os.open(host, _DIR_FLAGS)
    except OSError as exc:
        skipped.append(f"{root}: skipped: {exc.strerror or exc}")
        return
    try:
        _scan_directory(root, (), fd, found, skipped)
    finally:
        os.close(fd)


def _scan_directory(root: str, parts: tuple[str, ...], fd: int, found: list[_Found], skipped: list[str]) -> None:
    with os.scandir(fd) as scan:
        children = sorted(scan, key=lambda child: child.name)
    for child in children:
        path = "/".join((root, *parts, child.name))
        try:
            child.name.encode()
            status = child.stat(follow_symlinks=False)
        except UnicodeEncodeError:
            skipped.append(f"{path.encode(errors='replace').decode()}: the name is not UTF-8")
            continue
        except FileNotFoundError:
            continue  # removed since the directory was read: not part of this checkpoint
        name = child.name
        if not _add(path, root, (*parts, name), status, partial(os.readlink, name, dir_fd=fd), found, skipped):
            continue
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            found.pop()
            skipped.append(f"{path}: skipped: {exc.strerror or exc}")
            continue
        try:
            _scan_directory(root, (*parts, name), sub, found, skipped)
        finally:
            os.close(sub)


def _add(
    path: str,
    root: str,
    parts: tuple[str, ...],
    status: os.stat_result,
    readlink: Callable[[], str],
    found: list[_Found],
    skipped: list[str],
) -> bool:
    """Record one walked entry; True when it is a directory to descend into."""
    mode = stat.S_IMODE(status.st_mode)
    if stat.S_ISDIR(status.st_mode):
        found.append(_Found(Entry(path, "dir", mode), root, parts))
        return True
    if stat.S_ISREG(status.st_mode):
        found.append(_Found(Entry(path, "file", mode, status.st_size), root, parts, _identity(status)))
    elif stat.S_ISLNK(status.st_mode):
        try:
            target = readlink()
            target.encode()
        except (OSError, UnicodeEncodeError) as exc:
            skipped.append(f"{path}: the symbolic link could not be read ({exc})")
            return False
        found.append(_Found(Entry(path, "symlink", mode, target=target), root, parts))
    else:
        skipped.append(f"{path}: not a regular file, directory or symbolic link")
    return False


class _Directories:
    """Opens files of the roots through their parents' descriptors, never through a symbolic link.
    Files come in walk order, so the descriptor of the last directory is kept for its next file."""

    def __init__(self, roots: Mapping[str, Path]) -> None:
        self._roots = roots
        self._open: tuple[tuple[str, tuple[str, ...]], int] | None = None

    def __enter__(self) -> _Directories:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._open is not None:
            os.close(self._open[1])
            self._open = None

    def open_file(self, root: str, parts: tuple[str, ...]) -> int:
        host = self._roots[root]
        if not parts:
            return os.open(host, _FILE_FLAGS)
        key = (root, parts[:-1])
        if self._open is None or self._open[0] != key:
            self.__exit__()
            fd = os.open(host, _DIR_FLAGS)
            try:
                for name in parts[:-1]:
                    parent, fd = fd, os.open(name, _DIR_FLAGS, dir_fd=fd)
                    os.close(parent)
            except BaseException:
                os.close(fd)
                raise
            self._open = (key, fd)
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=self._open[1])


def _copy_contents(source: int, target: int) -> int:
    """Copy ``source`` to ``target`` in the kernel (reflinks where the filesystem has them); bytes copied."""
    copied = 0
    with contextlib.suppress(OSError):  # EXDEV, ENOSYS, EINVAL...: fall back below
        while count := os.copy_file_range(source, target, 1 << 30):
            copied += count
        return copied
    if copied:
        raise OSError(errno.EIO, "copy_file_range failed part-way")
    while count := os.sendfile(target, source, None, 1 << 30):
        copied += count
    return copied


# --- restoring ------------------------------------------------------------------------------------


class Restoration:
    """One restore: the manifest's trees built in temporary siblings of the roots (``.nodus-restore-*``
    beside each), filled by :meth:`write` chunk by chunk, swapped in by :meth:`commit`.

    ``roots`` maps each of the manifest's paths to its host path (more roots are left alone). Until
    :meth:`commit`, the roots are untouched; :meth:`abort` (or leaving a ``with`` block without a
    commit) removes the siblings. :meth:`write` may be called from several threads at once. The swap
    renames each root, so restore before the sandbox binds them (a mount point cannot be renamed);
    with several roots, a failure during the swaps leaves the roots already swapped restored.
    """

    def __init__(self, manifest: Manifest, roots: Mapping[str, Path]) -> None:
        manifest.check()
        missing = [path for path in manifest.paths if path not in roots]
        if missing:
            raise RestoreFailed(f"the checkpoint saved {missing}, which are not among the paths to restore")
        self.manifest = manifest
        self._roots = {path: roots[path] for path in manifest.paths}
        self._token = secrets.token_hex(4)
        self._siblings: dict[str, Path] = {}
        self._places: dict[str, list[tuple[Path, int, int, str]]] = {}  # digest -> (file, offset, length, path)
        self._modes: list[tuple[Path, int]] = []
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        try:
            self._build()
        except BaseException:
            self.abort()
            raise

    def __enter__(self) -> Restoration:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort()

    def needed(self) -> list[str]:
        """The chunks still to :meth:`write`, each once."""
        with self._lock:
            return sorted(self._pending)

    def write(self, digest: str, data: bytes) -> None:
        """Write chunk ``digest`` wherever the manifest uses it; :class:`RestoreFailed` if ``data`` does
        not hash to ``digest`` or has the wrong length."""
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise RestoreFailed(f"chunk {digest} is damaged: its {len(data)} bytes hash to {actual}")
        if digest not in self._places:
            raise RestoreFailed(f"chunk {digest} is not part of the checkpoint")
        for file, offset, length, path in self._places[digest]:
            if len(data) != length:
                raise RestoreFailed(f"chunk {digest} has {len(data)} bytes, {path} needs {length} at {offset}")
            fd = os.open(file, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.pwrite(fd, view, offset + length - len(view)) :]
            finally:
                os.close(fd)
        with self._lock:
            self._pending.discard(digest)

    def commit(self) -> None:
        """Swap the new trees in for the roots, once every chunk was written."""
        if pending := self.needed():
            raise RestoreFailed(f"{len(pending)} chunks of the checkpoint were never written, such as {pending[0]}")
        for file, mode in reversed(self._modes):  # children before parents: a read-only directory comes last
            os.chmod(file, mode & _RESTORED_MODE_BITS)
        for root, sibling in list(self._siblings.items()):
            host = self._roots[root]
            old = host.parent / f".nodus-restore-{self._token}-old"  # removed before the next root's swap
            try:
                os.rename(host, old)
            except FileNotFoundError:
                moved = False
            else:
                moved = True
            os.rename(sibling, host)
            del self._siblings[root]
            if moved:
                _remove(old)

    def abort(self) -> None:
        """Remove what was built and not swapped in; the roots stay as they were. Idempotent."""
        for sibling in self._siblings.values():
            with contextlib.suppress(OSError):
                _remove(sibling)
        self._siblings.clear()

    def _build(self) -> None:
        """Create the directories, symbolic links and (sparse, full-size) files of every new tree."""
        size = self.manifest.chunk_size
        for n, root in enumerate(self.manifest.paths):
            host = self._roots[root]
            host.parent.mkdir(parents=True, exist_ok=True)
            self._siblings[root] = host.parent / f".nodus-restore-{self._token}-{n}"
            if not any(entry.path == root for entry in self.manifest.entries):
                # Missing when saved: an empty directory, since the sandbox binds the root.
                os.mkdir(self._siblings[root], 0o700)
                self._modes.append((self._siblings[root], 0o755))
        for entry in self.manifest.entries:
            owner = root_of(entry.path, self.manifest.paths)
            assert owner is not None  # check() saw to it
            sibling = self._siblings[owner]
            target = sibling / entry.path[len(owner) + 1 :] if entry.path != owner else sibling
            if entry.type == "dir":
                os.mkdir(target, 0o700)
            elif entry.type == "symlink":
                os.symlink(entry.target, target)
                continue
            else:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    os.ftruncate(fd, entry.size)
                finally:
                    os.close(fd)
                for index, digest in enumerate(entry.chunks):
                    offset = index * size
                    place = (target, offset, min(size, entry.size - offset), entry.path)
                    self._places.setdefault(digest, []).append(place)
            self._modes.append((target, entry.mode))
        self._pending = set(self._places)


def restore_into(manifest: Manifest, roots: Mapping[str, Path], read_chunk: Callable[[str], bytes]) -> None:
    """Make the roots exactly ``manifest``'s trees, reading each chunk once with ``read_chunk(digest)``.

    All or nothing (see :class:`Restoration`): on any failure (:class:`RestoreFailed` for a damaged
    chunk, :class:`ManifestInvalid` for a manifest that does not :meth:`~Manifest.check`, or whatever
    ``read_chunk`` raises) the roots are left as they were.
    """
    with Restoration(manifest, roots) as restoration:
        for digest in restoration.needed():
            restoration.write(digest, read_chunk(digest))
        restoration.commit()


def _remove(path: Path) -> None:
    """Delete a file, link or tree; a tree with read-only directories is opened up first."""
    if not path.is_dir() or path.is_symlink():
        path.unlink(missing_ok=True)
        return
    try:
        shutil.rmtree(path)
    except PermissionError:
        os.chmod(path, 0o700)
        for parent, directories, _ in os.walk(path):  # top-down: a directory is opened up before it is listed
            for name in directories:
                if not os.path.islink(child := os.path.join(parent, name)):
                    os.chmod(child, 0o700)
        shutil.rmtree(path)
