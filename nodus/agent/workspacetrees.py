"""Workspace trees: a directory as a workspace manifest and its chunks, and a manifest's subtree written back.

A Workspace revision pushed from a directory is stored as a checkpoint would be (``nodus.agent.manifests``):
fixed-size content-addressed chunks, and a manifest with the single root ``/workspace`` naming them. So a
push sends only the chunks the project lacks (a file unchanged since the last push is chunks the server
already holds), and the chunks a checkpoint and a workspace share are stored once.

* :func:`scan` walks a directory without following symbolic links (each directory and file opened
  relative to its parent with ``O_NOFOLLOW``; links are recorded as links, fifos, sockets and devices
  skipped and reported) and returns the manifest and where each chunk's bytes are.
* :func:`subtree` re-roots the entries below one subdirectory of a manifest at ``/workspace``: what a
  Job's ``fromWorkspace.path`` mounts.
* :func:`write` makes a host directory exactly a manifest's tree, all or nothing, through
  :class:`nodus.agent.restoring.Restoration`: the manifest is checked in full first (normalised paths,
  every entry inside a directory entry, so nothing is written through a link), links are recreated but
  never followed, and every chunk's bytes must hash to its name.

Blocking filesystem work: call it from a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from nodus.agent import restoring
from nodus.agent.manifests import CHUNK_SIZE, Entry, Manifest, ManifestInvalid
from nodus.agent.snapshots import ChunkRef
from nodus.apimachinery.units import format_time, now
from nodus.apis.v1.workspace import ROOT

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class SubdirectoryMissing(Exception):
    """The subdirectory a Job mounts is not a directory of the revision."""


@dataclass(frozen=True)
class Scanned:
    """A directory as a workspace manifest; ``chunks`` says where each chunk's bytes are (one place each)."""

    manifest: Manifest
    chunks: dict[str, ChunkRef]
    skipped: tuple[str, ...]


def scan(directory: Path, chunk_size: int = CHUNK_SIZE) -> Scanned:
    """The tree below ``directory`` as a manifest rooted at ``/workspace`` (see the module docstring).
    ``directory`` itself must be a directory, not a link (OSError otherwise)."""
    entries: list[Entry] = []
    chunks: dict[str, ChunkRef] = {}
    skipped: list[str] = []
    top = os.open(directory, _DIR_FLAGS)
    try:
        entries.append(Entry(ROOT, "dir", stat.S_IMODE(os.fstat(top).st_mode)))
        for entry, ref in _walk(top, directory, ROOT, chunk_size, skipped):
            entries.append(entry)
            chunks.update(ref)
    finally:
        os.close(top)
    entries.sort(key=lambda e: e.path.split("/"))
    manifest = Manifest("Snapshot", 0, [ROOT], chunk_size, entries, format_time(now()), {})
    manifest.check()
    return Scanned(manifest, chunks, tuple(skipped))


def _walk(
    fd: int, host: Path, shown: str, chunk_size: int, skipped: list[str]
) -> Iterator[tuple[Entry, dict[str, ChunkRef]]]:
    for name in sorted(os.listdir(fd)):
        path = f"{shown}/{name}"
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISLNK(info.st_mode):
            yield Entry(path, "symlink", 0o777, target=os.readlink(name, dir_fd=fd)), {}
        elif stat.S_ISDIR(info.st_mode):
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            try:
                yield Entry(path, "dir", mode), {}
                yield from _walk(child, host / name, path, chunk_size, skipped)
            finally:
                os.close(child)
        elif stat.S_ISREG(info.st_mode):
            digests, refs = _hash(fd, name, host / name, chunk_size)
            yield Entry(path, "file", mode, size=info.st_size, chunks=digests), refs
        else:
            skipped.append(f"{path} (not a file, directory or link)")


def _hash(fd: int, name: str, host: Path, chunk_size: int) -> tuple[tuple[str, ...], dict[str, ChunkRef]]:
    digests: list[str] = []
    refs: dict[str, ChunkRef] = {}
    handle = os.open(name, _FILE_FLAGS, dir_fd=fd)
    try:
        offset = 0
        while data := os.pread(handle, chunk_size, offset):
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            digests.append(digest)
            refs.setdefault(digest, ChunkRef(host, offset, len(data)))
            offset += len(data)
    finally:
        os.close(handle)
    return tuple(digests), refs


def subtree(manifest: Manifest, path: str) -> Manifest:
    """The entries below ``path`` (relative to the home; ``""`` or ``.``: all of it) re-rooted at
    ``/workspace``; :class:`SubdirectoryMissing` when the revision has no directory there."""
    manifest.check()
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ManifestInvalid(f"path {path!r} must not contain '..'")
    if not parts:
        return manifest
    prefix = ROOT + "/" + "/".join(parts)
    found = next((e for e in manifest.entries if e.path == prefix), None)
    if found is None or found.type != "dir":
        what = "is not a directory" if found else "does not exist"
        raise SubdirectoryMissing(f"{'/'.join(parts)} {what} in the workspace revision")
    entries = [
        replace(e, path=ROOT + e.path[len(prefix) :])
        for e in manifest.entries
        if e.path == prefix or e.path.startswith(prefix + "/")
    ]
    sub = replace(manifest, entries=entries)
    sub.check()
    return sub


def write(manifest: Manifest, target: Path, read_chunk: Callable[[str], bytes]) -> None:
    """Make ``target`` (its parent trusted) exactly ``manifest``'s tree, reading each chunk once with
    ``read_chunk``; all or nothing (:class:`~nodus.agent.restoring.RestoreFailed`,
    :class:`~nodus.agent.manifests.ManifestInvalid`)."""
    restoring.restore_into(manifest, {ROOT: target}, read_chunk)


def restoration(manifest: Manifest, target: Path) -> restoring.Restoration:
    """A :class:`~nodus.agent.restoring.Restoration` of ``manifest`` at ``target`` (to fill concurrently)."""
    return restoring.Restoration(manifest, {ROOT: target})
