"""Checkpoint snapshots on the agent's disk: the mirror of the roots that checkpoints are taken from.

A checkpoint is content-addressed chunks plus one manifest that names them (``nodus.agent.manifests``).

**The mirror** (:class:`Mirror`) is an agent-owned copy of the roots kept between the checkpoints of
one attempt. :meth:`Mirror.stage` is what the program waits for (frozen, or having promised not to
write): a walk, then a copy of only the files whose (device, inode, size, mtime, ctime) changed since
the last stage, as fast as the kernel copies (``copy_file_range``), with no hashing. Once it returns
the program may go on; :meth:`Mirror.manifest` then hashes the mirror's copies, never the live files,
re-hashing only files copied since the last manifest, and :meth:`Mirror.chunk_reader` serves one
chunk at a time to the uploader. The mirror's bookkeeping lives in memory: a new :class:`Mirror`
(an agent restart) starts empty and copies and hashes everything once. After a restore
(``nodus.agent.restoring``), :meth:`Mirror.seed` teaches the mirror the restored files, so that the
first checkpoint after it copies and uploads only what changed since.

**Safety.** The roots belong to the program, which runs as the agent's user but sees only its
sandbox; it must not get the agent to read a host path outside the roots. So each root is reached from
the trusted host directory behind its mount one component at a time without following links
(``nodus.agent.hostfiles``: a root whose path leads through a link raises
:class:`~nodus.agent.hostfiles.UnsafePath`; a root that is itself a link is recorded as one), and the walk
and the copies open every directory and file relative to its parent's descriptor with ``O_NOFOLLOW`` (a
directory swapped for a symbolic link mid-walk is skipped, never followed); symbolic links are recorded,
never followed (ADR 0031). Modes are recorded; modification times and owners are not.

Everything here is blocking filesystem work: call it from a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from nodus.agent import hostfiles
from nodus.agent.manifests import CHUNK_SIZE, Entry, Format, Manifest, check_roots

# Format belongs to manifests; it is re-exported because callers (checkpointing) name it snapshots.Format.
__all__ = ["ChunkRef", "Format", "Mirror", "Staged", "TooLarge"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a file swapped for a fifo between the walk and the copy must not hang the agent.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_HASHERS = min(4, os.cpu_count() or 1)  # sha256 releases the GIL: chunks hash in parallel


class TooLarge(Exception):
    """The roots hold more than the checkpoint may (``spec.recovery.checkpoint.maxSize``)."""

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"the checkpoint paths hold {size} bytes, more than the maximum of {max_size} bytes")
        self.size = size
        self.max_size = max_size


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
    the program sees it (``/nodus/state``) to where it is on the host: a
    :class:`~nodus.agent.hostfiles.Location` below a trusted directory, or a host path whose parent is
    trusted. One checkpoint at a time:
    do not stage while chunks of the previous manifest are still being read. :meth:`stage`,
    :meth:`manifest` and :meth:`seed` take a lock, so a call whose awaiting task was cancelled (its
    worker thread runs on) finishes before the next one starts.
    """

    def __init__(self, directory: Path, roots: Mapping[str, Path | hostfiles.Location]) -> None:
        check_roots(list(roots), ValueError)
        self.roots = dict(roots)
        self._places = {root: hostfiles.location(where) for root, where in roots.items()}
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
        ``max_size`` bytes, :class:`~nodus.agent.hostfiles.UnsafePath` for a root whose path leads through a
        link. A missing root counts as empty. Files that vanish or turn into something else during the walk
        are skipped (listed in ``skipped``), never followed.
        """
        with self._lock:
            return self._stage(max_size)

    def _stage(self, max_size: int) -> Staged:
        found: list[_Found] = []
        skipped: list[str] = []
        for root, location in self._places.items():
            _scan_root(root, location, found, skipped)
        size = sum(item.entry.size for item in found if item.entry.type == "file")
        if size > max_size:
            raise TooLarge(size, max_size)
        entries: list[Entry] = []
        kept: dict[str, _Copy] = {}
        copied = copied_bytes = 0
        try:
            with _Directories(self._places) as directories:
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
        except hostfiles.UnsafePath:
            skipped.append(f"{path}: skipped: it now leads through a symbolic link")
            return None
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


def _scan_root(root: str, location: hostfiles.Location, found: list[_Found], skipped: list[str]) -> None:
    """Add ``root`` and, for a directory, everything under it to ``found`` (symbolic links not followed)."""
    try:
        status = hostfiles.lstat(location)
    except FileNotFoundError:
        return
    if not _add(root, root, (), status, lambda: hostfiles.readlink(location), found, skipped):
        return
    try:
        fd = hostfiles.open_directory(location)
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

    def __init__(self, roots: Mapping[str, hostfiles.Location]) -> None:
        self._roots = roots
        self._open: tuple[tuple[str, tuple[str, ...]], int] | None = None

    def __enter__(self) -> _Directories:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._open is not None:
            os.close(self._open[1])
            self._open = None

    def open_file(self, root: str, parts: tuple[str, ...]) -> int:
        target = self._roots[root].child(*parts)
        if not target.parts:
            return os.open(target.base, _FILE_FLAGS)  # the trusted base itself
        key = (root, parts[:-1])
        if self._open is None or self._open[0] != key:
            self.__exit__()
            self._open = (key, hostfiles.open_directory(target.parent))
        return os.open(target.name, _FILE_FLAGS, dir_fd=self._open[1])


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
