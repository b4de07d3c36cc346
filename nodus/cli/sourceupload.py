"""``nodus run --source DIR``: the directory as the Job's source, a tar.zst blob named by its digest.

What goes in is what ``git add .`` would take:

* every ``.gitignore`` in the tree applies to the paths below its directory, with git's rules
  (``pathspec``'s gitwildmatch: ``*``, ``**``, a trailing ``/`` for directories only, a leading ``/``
  anchoring to that file's directory, ``!`` re-including); a deeper file's matching pattern overrides a
  shallower one's, and within one file the last matching pattern decides;
* an ignored directory is left out whole (as in git, a ``!`` pattern cannot bring back a file below it);
* ``.git/`` is always left out, as are sockets, FIFOs and devices.

Symbolic links are stored as links (their target as written), never followed: a link pointing out of
DIR, or to a directory, puts nothing from outside DIR in the archive. The agent unpacks only relative links
that stay inside the archive (``nodus.agent.archives.contained_link``) and refuses the whole archive
otherwise (``ArchiveUnsafe``), so :func:`upload` refuses such a tree before anything is sent
(:func:`leaving_links`), naming each link: a Job that could only fail is never created.

The archive is written to a temporary file while its SHA-256 is computed, then uploaded with
``?digest=sha256:...`` so that the server refuses bytes that changed on the way; identical trees upload
the same bytes only once per project (the server answers 201 with the stored blob).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import pathspec

TAR_ZSTD = "application/vnd.nodus.tar+zstd"
_CHUNK = 1 << 20


class SourceError(ValueError):
    """DIR cannot be packed; the message is one line naming the problem and the fix."""


@dataclass(frozen=True)
class Packed:
    """An archive written: its digest (``sha256:<hex>``), its size in bytes and what it holds."""

    digest: str
    size: int
    files: int
    ignored: int


class _Rules:
    """The ``.gitignore`` files that apply in one directory, outermost first, each with its directory
    (relative to DIR, POSIX, ``""`` for DIR itself)."""

    def __init__(self, levels: tuple[tuple[str, pathspec.GitIgnoreSpec], ...] = ()) -> None:
        self.levels = levels

    def below(self, directory: Path, relative: str) -> _Rules:
        """The rules for the entries of ``directory`` (``relative`` to DIR): these plus its own .gitignore."""
        ignore = directory / ".gitignore"
        if not ignore.is_file() or ignore.is_symlink():
            return self
        try:
            lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise SourceError(f"--source: cannot read {ignore}: {exc.strerror}") from None
        return _Rules((*self.levels, (relative, pathspec.GitIgnoreSpec.from_lines(lines))))

    def ignores(self, relative: str, is_dir: bool) -> bool:
        """Whether the entry ``relative`` (to DIR) is ignored: the deepest .gitignore with a matching pattern
        decides (its last matching pattern: ignore, or ``!`` keep)."""
        for base, spec in reversed(self.levels):
            inner = relative[len(base) + 1 :] if base else relative
            result = spec.check_file(inner + "/" if is_dir else inner)
            if result.include is not None:
                return bool(result.include)
        return False


def selected(directory: Path) -> Iterator[tuple[Path, str]]:
    """The entries of ``directory`` that :func:`pack` archives, as (path, archive name), parents before
    children, in name order; ignored entries (and everything below an ignored directory) are absent."""
    for path, name, kept in _walk(directory):
        if kept:
            yield path, name


def _walk(directory: Path) -> Iterator[tuple[Path, str, bool]]:
    """Every entry below ``directory`` with its archive name and whether it is kept (ignored ones are yielded
    once, with False, so that :func:`pack` can count them; their contents are not visited)."""
    root = directory.resolve()
    if not root.is_dir():
        raise SourceError(f"--source {directory}: not a directory")
    pending: list[tuple[Path, str, _Rules]] = [(root, "", _Rules().below(root, ""))]
    while pending:
        current, relative, rules = pending.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError as exc:
            raise SourceError(f"--source: cannot list {current}: {exc.strerror}") from None
        subdirectories: list[tuple[Path, str, _Rules]] = []
        for entry in entries:
            name = f"{relative}/{entry.name}" if relative else entry.name
            mode = entry.stat(follow_symlinks=False).st_mode
            is_dir = stat.S_ISDIR(mode)
            if is_dir and entry.name == ".git":
                continue
            if not (is_dir or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                continue  # sockets, FIFOs, devices: not source
            if rules.ignores(name, is_dir):
                yield Path(entry.path), name, False
                continue
            yield Path(entry.path), name, True
            if is_dir:
                subdirectories.append((Path(entry.path), name, rules.below(Path(entry.path), name)))
        # Depth first in name order: reversed so that pop() takes the first.
        pending.extend(reversed(subdirectories))


def pack(directory: Path, into: IO[bytes]) -> Packed:
    """Write the selected tree of ``directory`` to ``into`` as a zstd-compressed (PAX) tar; returns its digest
    and size as written."""
    import zstandard

    hashing = _Hashing(into)
    files = ignored = 0
    compressor = zstandard.ZstdCompressor(level=3)
    with (
        compressor.stream_writer(cast(IO[bytes], hashing), closefd=False) as compressed,
        tarfile.open(fileobj=compressed, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path, name, kept in _walk(directory):
            if not kept:
                ignored += 1
                continue
            try:
                info = tar.gettarinfo(str(path), arcname=name)  # lstat: a link stays a link
                if info.isreg():
                    with path.open("rb") as handle:
                        tar.addfile(info, handle)
                    files += 1
                else:
                    tar.addfile(info)
                    files += int(info.issym())
            except OSError as exc:
                raise SourceError(f"--source: cannot read {path}: {exc.strerror}") from None
    return Packed("sha256:" + hashing.sha256.hexdigest(), hashing.size, files, ignored)


def leaving_links(directory: Path) -> list[tuple[str, str]]:
    """The symbolic links :func:`pack` would store that the agent refuses to unpack, as (name, target): absolute
    ones and relative ones that climb out of the tree."""
    from nodus.agent.archives import contained_link

    found = []
    for path, name, kept in _walk(directory):
        if kept and path.is_symlink():
            target = os.readlink(path)
            if not contained_link(tuple(name.split("/")), target):
                found.append((name, target))
    return found


async def upload(client: Any, project: str, directory: Path) -> tuple[Packed, dict[str, Any]]:
    """Pack ``directory`` and upload it as a blob of ``project``; returns what was packed and the server's
    Blob (``{"digest": ..., "size": ...}``). Raises :class:`SourceError` (a link leaving the tree: nothing is
    sent) or the client's ``APIError``."""
    import asyncio

    leaving = await asyncio.to_thread(leaving_links, directory)
    if leaving:
        named = ", ".join(f"{name} -> {target}" for name, target in leaving[:5])
        more = f" and {len(leaving) - 5} more" if len(leaving) > 5 else ""
        raise SourceError(
            f"--source {directory}: links that leave it ({named}{more}): the Job's source is unpacked only with "
            "relative links that stay inside it; add them to .gitignore or replace each with what it points to"
        )
    with tempfile.TemporaryFile(prefix="nodus-source-") as spool:
        packed = await asyncio.to_thread(pack, directory, spool)
        spool.seek(0)

        async def chunks() -> Any:
            while data := await asyncio.to_thread(spool.read, _CHUNK):
                yield data

        blob = await client.upload_blob(project, chunks(), TAR_ZSTD, digest=packed.digest)
    return packed, blob


class _Hashing(io.RawIOBase):
    """A writable file that passes bytes on to ``target`` and hashes and counts them."""

    def __init__(self, target: IO[bytes]) -> None:
        super().__init__()
        self.target = target
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.sha256.update(chunk)
        self.size += len(chunk)
        self.target.write(chunk)
        return len(chunk)

    def flush(self) -> None:
        self.target.flush()
