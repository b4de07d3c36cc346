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
* **Safe extraction.** :func:`unpack` refuses, with :class:`ArchiveError`, a member with an absolute
  name or a ``..`` component, and applies ``tarfile``'s ``data`` filter to the rest: no links that
  point outside the destination or are absolute, no devices or fifos, no setuid bits. An archive that
  fails part-way leaves what was extracted so far: treat the destination as garbage on error.

Media types other than :data:`TAR` and :data:`TAR_ZSTD` are not archives: their bytes are written
as one file at the destination path.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import tarfile
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO

import zstandard

TAR = "application/x-tar"
TAR_ZSTD = "application/vnd.nodus.tar+zstd"
CHUNK = 1 << 20
"""Read and write granularity: no more than this much of a file is in memory at once."""
ZSTD_LEVEL = 3
_BLOCK = tarfile.BLOCKSIZE


class ArchiveError(Exception):
    """The archive is malformed or unsafe, or the directory cannot be packed."""


def pack(directory: Path) -> Generator[bytes, None, None]:
    """Yield the :data:`TAR_ZSTD` archive of ``directory`` in chunks of about :data:`CHUNK` bytes.

    Blocking (it reads files): iterate it in a worker thread, or use :func:`pack_async`. Member names
    are relative to ``directory`` (``a/b.txt``); the directory itself is not a member. A file that
    shrinks while it is packed raises :class:`ArchiveError` (the archive would be corrupt); one that
    grows is cut at the size it had when its header was written.
    """
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()
    pending = bytearray()
    for piece in _tar_stream(directory):
        pending += compressor.compress(piece)
        if len(pending) >= CHUNK:
            yield bytes(pending)
            pending.clear()
    pending += compressor.flush()
    if pending:
        yield bytes(pending)


async def pack_async(directory: Path) -> AsyncIterator[bytes]:
    """:func:`pack` for the event loop: each chunk is produced in a worker thread."""
    chunks = pack(directory)
    done = object()
    try:
        while (chunk := await asyncio.to_thread(next, chunks, done)) is not done:
            assert isinstance(chunk, bytes)
            yield chunk
    finally:
        chunks.close()


def pack_to_file(directory: Path, destination: Path) -> tuple[str, int]:
    """Write the :data:`TAR_ZSTD` archive of ``directory`` to ``destination``; return its (sha256 hex, size)."""
    digest, size = hashlib.sha256(), 0
    with destination.open("wb") as out:
        for chunk in pack(directory):
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


def unpack(source: Path | BinaryIO, destination: Path, media_type: str) -> None:
    """Extract ``source`` (a path or a readable binary file) according to ``media_type``.

    For :data:`TAR` and :data:`TAR_ZSTD` (parameters such as ``; charset`` are ignored), ``destination``
    is a directory, created if missing, that receives the members (see the module docstring for what is
    refused). For any other media type ``destination`` is the path of the single file written with the
    source's bytes; its parent must exist. A file-like ``source`` is read from its current position and
    not closed. Raises :class:`ArchiveError` for a malformed or unsafe archive.
    """
    kind = media_type.split(";", 1)[0].strip().lower()
    if isinstance(source, Path):
        with source.open("rb") as stream:
            _unpack_stream(stream, destination, kind)
    else:
        _unpack_stream(source, destination, kind)


def _unpack_stream(stream: BinaryIO, destination: Path, kind: str) -> None:
    if kind == TAR:
        _extract(stream, destination)
    elif kind == TAR_ZSTD:
        # A multi-frame file (pzstd, concatenated frames) is one stream, as the zstd CLI sees it.
        decompressor = zstandard.ZstdDecompressor()
        try:
            with decompressor.stream_reader(stream, read_across_frames=True, closefd=False) as reader:
                _extract(reader, destination)
        except zstandard.ZstdError as exc:
            raise ArchiveError(f"not a valid zstandard stream: {exc}") from exc
    else:
        with destination.open("wb") as out:
            while chunk := stream.read(CHUNK):
                out.write(chunk)


def _extract(stream: IO[bytes], destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            archive.extractall(destination, filter=_safe_filter)
    except tarfile.FilterError as exc:
        raise ArchiveError(f"unsafe archive member: {exc}") from exc
    except tarfile.TarError as exc:
        raise ArchiveError(f"not a valid tar archive: {exc}") from exc


def _safe_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    # The data filter would quietly strip a leading "/"; an archive that asks for one is refused instead.
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise ArchiveError(f"unsafe archive member {member.name!r}: absolute name or '..' component")
    return tarfile.data_filter(member, path)


def _tar_stream(directory: Path) -> Iterator[bytes]:
    """The uncompressed tar stream, as headers, file pieces and padding."""
    if not directory.is_dir():
        raise ArchiveError(f"{directory} is not a directory")
    for relative, info in _members(directory):
        yield info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")
        if info.isfile():
            yield from _file_pieces(directory / relative, info.size)
            if remainder := info.size % _BLOCK:
                yield bytes(_BLOCK - remainder)
    yield bytes(2 * _BLOCK)  # the end-of-archive marker


def _members(directory: Path, prefix: str = "") -> Iterator[tuple[str, tarfile.TarInfo]]:
    """(relative path, header) of every packable entry under ``directory``, depth first in sorted order."""
    with os.scandir(directory) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    for entry in entries:
        status = entry.stat(follow_symlinks=False)
        relative = prefix + entry.name
        info = tarfile.TarInfo(relative)
        info.mode, info.mtime, info.uid, info.gid = stat.S_IMODE(status.st_mode), int(status.st_mtime), 0, 0
        if stat.S_ISDIR(status.st_mode):
            info.type = tarfile.DIRTYPE
            yield relative, info
            yield from _members(Path(entry.path), relative + "/")
        elif stat.S_ISREG(status.st_mode):
            info.type, info.size = tarfile.REGTYPE, status.st_size
            yield relative, info
        elif stat.S_ISLNK(status.st_mode):
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(entry.path)
            yield relative, info


def _file_pieces(path: Path, size: int) -> Iterator[bytes]:
    remaining = size
    with path.open("rb") as source:
        while remaining:
            piece = source.read(min(CHUNK, remaining))
            if not piece:
                raise ArchiveError(f"{path} shrank while it was being packed")
            remaining -= len(piece)
            yield piece
