"""Directory archives: tar compressed with zstandard, packed and unpacked as streams.

A directory (an attempt's outputs, a Volume) travels as one blob of media type :data:`TAR_ZSTD`:
a POSIX (pax) tar stream in a single zstandard frame. Guarantees:

* **Bounded memory.** :func:`pack` is a pull generator: it builds each member's header with
  ``TarInfo.tobuf`` and reads file contents in :data:`CHUNK` pieces, so no file is ever held whole and
  the consumer's pace is the producer's pace (no thread, no queue to bound). :func:`unpack` reads the
  source through ``tarfile``'s stream mode (``r|``), one block at a time.
* **Deterministic.** Members are in sorted path order (a directory before its contents), owners are
  ``0:0`` with no names, so the same tree with the same modes and mtimes packs to the same bytes.
  Only directories, regular files and symbolic links are packed; fifos, sockets and devices are
  skipped; hard links are packed as separate regular files.
* **Packing never follows a link** (ADR 0031). The tree is the program's: every directory and file is
  opened through its parent's descriptor with ``O_NOFOLLOW`` (``nodus.agent.hostfiles``), so a symbolic
  link is packed as a link member and a file swapped for a link mid-pack fails the pack
  (:class:`~nodus.agent.hostfiles.UnsafePath`), never reads the link's target.
* **Unpacking writes only files, directories and links that stay below the destination.** ``tarfile``
  only parses headers here; its extraction code and filters are never used. Each member is checked
  first, name and link name: a hard link, a device, a fifo, a sparse file, an absolute name, a ``..``
  component, a member that collides with an earlier one (same name twice, a file where a directory or
  link is, or the reverse) are refused with :class:`ArchiveError`. A symbolic link is kept only when it
  is *contained* (:func:`contained_link`): a relative target whose leading ``..`` components climb no
  higher than the link's own directory, followed by plain names only (``../../blobs/ab12``, as a Hugging
  Face cache links its snapshots to its blobs). Whatever other contained links it passes through, such a
  target resolves below the destination, inside the sandbox as on the host; an absolute target, one that
  climbs out, or one with ``..`` after a name (``a/../..``, which another link could turn into an escape)
  is refused. Links are created, never followed: every later member is written through descriptors opened
  with ``O_NOFOLLOW`` component by component, so a member "through" a link collides instead. Files are
  created by this module, ``O_CREAT | O_EXCL | O_NOFOLLOW`` through their directory's descriptor,
  directories one component at a time; modes lose set-user-ID, set-group-ID, sticky and group/other write
  bits; owners are not kept. :class:`Limits` bounds the entries and the bytes written (the declared sizes
  are checked before anything is written). An archive refused part-way leaves what was written so far:
  treat the destination as garbage on error.

Media types other than :data:`TAR` and :data:`TAR_ZSTD` are not archives: their bytes are written
as one new file at the destination path (within the same byte bound).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import tarfile
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

import zstandard

from nodus.agent import hostfiles

TAR = "application/x-tar"
TAR_ZSTD = "application/vnd.nodus.tar+zstd"
CHUNK = 1 << 20
"""Read and write granularity: no more than this much of a file is in memory at once."""
ZSTD_LEVEL = 3
MAX_BYTES = 1 << 40
"""Default bound on the bytes one archive may unpack to (1 TiB): the largest local disk of the catalog's hosts
is a few TiB, and a zstandard frame of a few MiB can claim far more."""
MAX_ENTRIES = 1_000_000
"""Default bound on the members of one archive: each costs an inode and a few system calls."""
REFUSED = 3
"""Exit status of ``python -m nodus.agent.archives`` (:func:`main`) for a refused archive; stderr says why."""
_BLOCK = tarfile.BLOCKSIZE
_DIRECTORY_MODE_BITS = 0o755  # no set-user-ID, set-group-ID or sticky bits, no group or other write
_FILE_MODE_BITS = 0o755


class ArchiveError(Exception):
    """The archive is malformed or unsafe, or the directory cannot be packed."""


@dataclass(frozen=True)
class Limits:
    """How much one archive may unpack to: regular files' bytes and members (directories included)."""

    max_bytes: int = MAX_BYTES
    max_entries: int = MAX_ENTRIES


def is_archive(media_type: str) -> bool:
    """Whether ``media_type`` (parameters such as ``; charset`` ignored) unpacks to a directory."""
    return _kind(media_type) in (TAR, TAR_ZSTD)


# --- packing ---------------------------------------------------------------------------------------------


def pack(directory: Path | int, *, shown: str = "") -> Generator[bytes, None, None]:
    """Yield the :data:`TAR_ZSTD` archive of ``directory`` in chunks of about :data:`CHUNK` bytes.

    ``directory`` is a trusted host path, or an open directory descriptor (which stays the caller's);
    nothing below it is reached through a link (see the module docstring). ``shown`` names it in
    messages (``/nodus/outputs``). Blocking (it reads files): iterate it in a worker thread, or use
    :func:`pack_async`. Member names are relative to ``directory`` (``a/b.txt``); the directory itself is
    not a member. A file that shrinks while it is packed raises :class:`ArchiveError` (the archive would
    be corrupt); one that grows is cut at the size it had when its header was written.
    """
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()
    pending = bytearray()
    for piece in _tar_stream(directory, shown or (str(directory) if isinstance(directory, Path) else "the directory")):
        pending += compressor.compress(piece)
        if len(pending) >= CHUNK:
            yield bytes(pending)
            pending.clear()
    pending += compressor.flush()
    if pending:
        yield bytes(pending)


async def pack_async(directory: Path | int, *, shown: str = "") -> AsyncIterator[bytes]:
    """:func:`pack` for the event loop: each chunk is produced in a worker thread."""
    import asyncio  # here: the unpacking sandbox imports this module, and asyncio would double its start-up

    chunks = pack(directory, shown=shown)
    done = object()
    try:
        while (chunk := await asyncio.to_thread(next, chunks, done)) is not done:
            assert isinstance(chunk, bytes)
            yield chunk
    finally:
        chunks.close()


def pack_to_file(directory: Path | int, destination: Path, *, shown: str = "") -> tuple[str, int]:
    """Write the :data:`TAR_ZSTD` archive of ``directory`` to ``destination``; return its (sha256 hex, size)."""
    digest, size = hashlib.sha256(), 0
    with destination.open("wb") as out:
        for chunk in pack(directory, shown=shown):
            out.write(chunk)
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def digest_file(path: Path) -> tuple[str, int]:
    """The (sha256 hex, size in bytes) of the file at ``path``, read in :data:`CHUNK` pieces."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _tar_stream(directory: Path | int, shown: str) -> Iterator[bytes]:
    """The uncompressed tar stream, as headers, file pieces and padding."""
    try:
        fd = os.dup(directory) if isinstance(directory, int) else os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise ArchiveError(f"{shown} is not a directory: {exc.strerror}") from None
    try:
        for entry in hostfiles.walk(fd, shown):
            yield from _member(entry, f"{shown.rstrip('/')}/{entry.relative}")
    finally:
        os.close(fd)
    yield bytes(2 * _BLOCK)  # the end-of-archive marker


def _member(entry: hostfiles.Entry, shown: str) -> Iterator[bytes]:
    status = entry.status
    if stat.S_ISDIR(status.st_mode):
        yield _header(entry.relative, status, tarfile.DIRTYPE)
    elif stat.S_ISLNK(status.st_mode):
        yield _header(entry.relative, status, tarfile.SYMTYPE, linkname=os.readlink(entry.name, dir_fd=entry.directory))
    elif stat.S_ISREG(status.st_mode):
        fd, opened = hostfiles.open_entry_at(entry.directory, entry.name, shown)
        try:
            if not stat.S_ISREG(opened.st_mode):
                raise hostfiles.UnsafePath(shown, "was replaced by a directory while it was being packed")
            yield _header(entry.relative, opened, tarfile.REGTYPE)
            yield from _file_pieces(fd, opened.st_size, shown)
        finally:
            os.close(fd)
        if remainder := opened.st_size % _BLOCK:
            yield bytes(_BLOCK - remainder)


def _header(relative: str, status: os.stat_result, kind: bytes, linkname: str = "") -> bytes:
    info = tarfile.TarInfo(relative)
    info.mode, info.mtime, info.uid, info.gid = stat.S_IMODE(status.st_mode), int(status.st_mtime), 0, 0
    info.type, info.linkname = kind, linkname
    if kind == tarfile.REGTYPE:
        info.size = status.st_size
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")


def _file_pieces(fd: int, size: int, shown: str) -> Iterator[bytes]:
    offset = 0
    while offset < size:
        piece = os.pread(fd, min(CHUNK, size - offset), offset)
        if not piece:
            raise ArchiveError(f"{shown} shrank while it was being packed")
        offset += len(piece)
        yield piece


# --- unpacking -------------------------------------------------------------------------------------------


def unpack(source: Path | BinaryIO, destination: Path, media_type: str, limits: Limits | None = None) -> None:
    """Extract ``source`` (a path or a readable binary file) according to ``media_type``, in this process.

    For :data:`TAR` and :data:`TAR_ZSTD` (parameters such as ``; charset`` are ignored), ``destination``
    is a directory, created if missing, that receives the members (see the module docstring for what is
    refused); members may not collide with what is already there, so pass a missing or empty directory.
    For any other media type ``destination`` is the path of the single file written with the source's
    bytes; its parent must exist and the name must be free. A file-like ``source`` is read from its
    current position and not closed. Raises :class:`ArchiveError` for a malformed or unsafe archive, or
    one past ``limits`` (default :class:`Limits`). ``nodus.agent.unpacking`` runs this in a sandbox.
    """
    limits = limits or Limits()
    kind = _kind(media_type)
    if isinstance(source, Path):
        with source.open("rb") as stream:
            _unpack_stream(stream, destination, kind, limits)
    else:
        _unpack_stream(source, destination, kind, limits)


def _kind(media_type: str) -> str:
    return media_type.split(";", 1)[0].strip().lower()


def _unpack_stream(stream: BinaryIO, destination: Path, kind: str, limits: Limits) -> None:
    if kind == TAR:
        _extract(stream, destination, limits)
    elif kind == TAR_ZSTD:
        # A multi-frame file (pzstd, concatenated frames) is one stream, as the zstd CLI sees it.
        decompressor = zstandard.ZstdDecompressor()
        try:
            with decompressor.stream_reader(stream, read_across_frames=True, closefd=False) as reader:
                _extract(reader, destination, limits)
        except zstandard.ZstdError as exc:
            raise ArchiveError(f"not a valid zstandard stream: {exc}") from exc
    else:
        _write_one(stream, destination, limits)


def _write_one(stream: IO[bytes], destination: Path, limits: Limits) -> None:
    parent = os.open(destination.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = hostfiles.create_at(parent, destination.name, 0o644)
    except FileExistsError:
        raise ArchiveError(f"{destination.name} already exists") from None
    finally:
        os.close(parent)
    with os.fdopen(fd, "wb") as out:
        written = 0
        while chunk := stream.read(CHUNK):
            written += len(chunk)
            if written > limits.max_bytes:
                raise ArchiveError(f"the content is larger than {limits.max_bytes} bytes")
            out.write(chunk)


def _extract(stream: IO[bytes], destination: Path, limits: Limits) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    root = os.open(destination, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            _Extraction(archive, root, limits).run()
    except tarfile.TarError as exc:
        raise ArchiveError(f"not a valid tar archive: {exc}") from exc
    finally:
        os.close(root)


class _Extraction:
    """One archive's members written below the descriptor ``root``, checked one by one."""

    def __init__(self, archive: tarfile.TarFile, root: int, limits: Limits) -> None:
        self._archive, self._root, self._limits = archive, root, limits
        self._entries = 0
        self._bytes = 0

    def run(self) -> None:
        for member in self._archive:
            self._entries += 1
            if self._entries > self._limits.max_entries:
                raise ArchiveError(f"the archive has more than {self._limits.max_entries} members")
            parts = _checked(member)
            try:
                if member.isdir():
                    self._directory(parts, member)
                elif member.issym():
                    self._link(parts, member)
                else:
                    self._file(parts, member)
            except hostfiles.UnsafePath as exc:
                raise _unsafe(member, f"collides with an earlier member ({exc})") from None
            except FileExistsError:
                raise _unsafe(member, "collides with an earlier member of the same name") from None
            except OSError as exc:
                raise ArchiveError(f"archive member {member.name!r} could not be written: {exc.strerror}") from None

    def _directory(self, parts: tuple[str, ...], member: tarfile.TarInfo) -> None:
        fd = hostfiles.descend(self._root, parts, ".", create=True, mode=0o700)
        try:
            os.fchmod(fd, (member.mode & _DIRECTORY_MODE_BITS) | 0o700)
        finally:
            os.close(fd)

    def _link(self, parts: tuple[str, ...], member: tarfile.TarInfo) -> None:
        if not parts:
            raise _unsafe(member, "is a link where the destination directory is")
        parent = hostfiles.descend(self._root, parts[:-1], ".", create=True, mode=0o755)
        try:
            os.symlink(member.linkname, parts[-1], dir_fd=parent)
        finally:
            os.close(parent)

    def _file(self, parts: tuple[str, ...], member: tarfile.TarInfo) -> None:
        if not parts:
            raise _unsafe(member, "is a file where the destination directory is")
        if member.size > self._limits.max_bytes - self._bytes:
            raise ArchiveError(
                f"archive member {member.name!r} ({member.size} bytes) would take the archive past "
                f"{self._limits.max_bytes} bytes"
            )
        self._bytes += member.size
        parent = hostfiles.descend(self._root, parts[:-1], ".", create=True, mode=0o755)
        try:
            fd = hostfiles.create_at(parent, parts[-1], 0o600)
        finally:
            os.close(parent)
        try:
            content = self._archive.extractfile(member)
            assert content is not None  # a regular file (checked)
            remaining = member.size
            while remaining:
                piece = content.read(min(CHUNK, remaining))
                if not piece:
                    raise ArchiveError(f"archive member {member.name!r} is cut short")
                remaining -= len(piece)
                view = memoryview(piece)
                while view:
                    view = view[os.write(fd, view) :]
            os.fchmod(fd, (member.mode & _FILE_MODE_BITS) | 0o600)
            with contextlib.suppress(OSError, OverflowError, ValueError):
                os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)


def _checked(member: tarfile.TarInfo) -> tuple[str, ...]:
    """The components of ``member``'s name below the destination; ArchiveError for a member that is
    refused (see the module docstring). ``.`` and empty components (``./a``, ``a//b``, ``dir/``) fold."""
    name = member.name
    if member.islnk():
        raise _unsafe(member, f"is a hard link to {member.linkname!r}; hard links are never unpacked")
    if member.linkname and not member.issym():
        raise _unsafe(member, f"names a link target ({member.linkname!r}) but is not a link")
    if member.issparse():
        raise _unsafe(member, "is a sparse file, which is not unpacked")
    if not (member.isreg() or member.isdir() or member.issym()):
        raise _unsafe(member, "is a device, fifo or other special file; only files, directories and links are unpacked")
    if name.startswith("/"):
        raise _unsafe(member, "has an absolute name")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise _unsafe(member, "has a '..' component")
    if member.issym() and not contained_link(parts, member.linkname):
        raise _unsafe(
            member,
            f"is a symbolic link to {member.linkname!r}, which leaves the archive; only relative links that stay "
            "inside it are unpacked",
        )
    return parts


def contained_link(parts: tuple[str, ...], target: str) -> bool:
    """Whether a symbolic link at ``parts`` (below the destination) to ``target`` resolves below the destination
    whatever other contained links it passes through: relative, a leading run of ``..`` no longer than the
    link's depth, then only names (``.`` and empty components fold)."""
    if not target or target.startswith("/") or "\0" in target:
        return False
    steps = [step for step in target.split("/") if step not in ("", ".")]
    climbs = 0
    while climbs < len(steps) and steps[climbs] == "..":
        climbs += 1
    return climbs <= len(parts) - 1 and ".." not in steps[climbs:] and bool(steps)


def _unsafe(member: tarfile.TarInfo, why: str) -> ArchiveError:
    return ArchiveError(f"unsafe archive member {member.name!r}: {why}")


# --- the unpacking sandbox's entry point -----------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    """``python -m nodus.agent.archives DESTINATION MEDIA_TYPE MAX_BYTES MAX_ENTRIES``: unpack standard input
    into DESTINATION (``nodus.agent.unpacking`` runs it in a sandbox); exit :data:`REFUSED` with the reason."""
    destination, media_type, max_bytes, max_entries = argv
    limits = Limits(max_bytes=int(max_bytes), max_entries=int(max_entries))
    try:
        unpack(sys.stdin.buffer, Path(destination), media_type, limits)
    except ArchiveError as exc:
        sys.stderr.write(str(exc))
        return REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
