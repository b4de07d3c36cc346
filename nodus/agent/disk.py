"""Ephemeral disk of an attempt: measured, and watched against ``resources.disk`` (ADR 0040).

Overlay on ext4 has no quota, so the agent does what the kubelet does for ephemeral storage: it measures
periodically and evicts. What counts is what the program can write outside a Volume: its container's
writable layer (the overlay upper directory, :func:`upper_dir`) and the attempt's writable host
directories (:func:`writable_paths`). A program over its limit fails with ``EphemeralStorageExceeded``.

:func:`usage` is the measure: allocated bytes (``st_blocks * 512``, so a sparse file counts what it holds,
not its size), each inode once (hard links, and paths that overlap, count once). The trees are the
tenant's, changing while they are walked, so the walk never follows a symbolic link (not even one swapped
in for a directory mid-walk: every directory is opened relative to its parent with ``O_NOFOLLOW`` and must
be the inode that was listed), never leaves a path's filesystem, holds one directory open at a time (a deep
tree cannot exhaust descriptors, nor hide below ``PATH_MAX``) and skips what vanishes or cannot be read.

:class:`DiskWatch` measures in a thread every ``interval`` seconds (a big tree must not block the event
loop), calls its ``on_exceeded(used)`` once when usage exceeds the limit, then stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nodus.agent.layout import NODUS_DIRECTORIES, READ_ONLY_DIRECTORIES, AttemptLayout
from nodus.agent.podengine import Engine

log = logging.getLogger(__name__)

BLOCK = 512
"""The unit of ``st_blocks``, whatever the filesystem's block size."""
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_Identity = tuple[int, int]
"""(st_dev, st_ino): one inode."""


def usage(paths: Iterable[Path]) -> int:
    """Bytes allocated under ``paths``: ``st_blocks * 512`` of every inode reached, each inode once.

    Symbolic links are counted as links, never followed (a root path that is a link included); a directory
    on another filesystem than its root path (a mount point) is neither counted nor entered. A path that does
    not exist counts 0, and whatever vanishes, is replaced or cannot be read mid-walk is skipped: never raises
    OSError. Blocking: run it in a thread."""
    seen: set[_Identity] = set()
    return sum(_root_usage(Path(path), seen) for path in paths)


def writable_paths(layout: AttemptLayout, *others: Path) -> list[Path]:
    """The attempt's host directories the program can write (every ``/nodus`` directory but the read-only
    ones, ``/nodus/progress`` and the working directory), and ``others`` (the pod's run directory)."""
    nodus = [layout.nodus_dir / name for name in NODUS_DIRECTORIES if name not in READ_ONLY_DIRECTORIES]
    return [*nodus, layout.progress, layout.workdir, *others]


async def upper_dir(engine: Engine, container: str) -> Path:
    """The host path of ``container``'s writable layer (its overlay upper directory), once it is created.
    LookupError when podman names none (no such container, or a storage driver without one)."""
    code, out, err = await engine.run(
        "inspect", "--type", "container", "--format", "{{.GraphDriver.Data.UpperDir}}", container
    )
    found = out.strip()
    if code != 0 or not found.startswith("/") or found == "<no value>":
        raise LookupError(f"no writable layer for container {container}: {err.strip() or found or 'none named'}")
    return Path(found)


def _root_usage(root: Path, seen: set[_Identity]) -> int:
    try:
        info = os.lstat(root)
    except OSError:
        return 0
    if not stat.S_ISDIR(info.st_mode):
        return _count(info, seen)
    try:
        fd = os.open(root, _DIRECTORY_FLAGS)
    except OSError:
        return 0
    try:
        opened = os.fstat(fd)
        if not stat.S_ISDIR(opened.st_mode):
            return 0
        return _walk(fd, opened, seen)
    finally:
        os.close(fd)


@dataclass
class _Frame:
    """A directory on the walk's path: its name in its parent, its inode, and its subdirectories left to visit."""

    name: str
    identity: _Identity
    pending: list[tuple[str, _Identity]] = field(default_factory=list)


def _walk(root_fd: int, root: os.stat_result, seen: set[_Identity]) -> int:
    """Allocated bytes of the tree whose root directory is open as ``root_fd`` (not closed here).

    Depth-first with one directory of the tree open besides the root: it descends by name relative to the open
    directory and climbs through ``..``, checking each time that the directory opened is the inode expected.
    A tenant moving directories during the walk makes a check fail: the path is then re-opened from the root,
    and what can no longer be reached is skipped (its files were counted or went with it)."""
    device = root.st_dev
    identity = (root.st_dev, root.st_ino)
    if identity in seen:
        return 0  # a root inside a tree already walked
    total = _count(root, seen)
    frames = [_Frame("", identity)]
    total += _list(root_fd, device, frames[0], seen)
    fd = os.dup(root_fd)
    try:
        while frames:
            top = frames[-1]
            if top.pending:
                name, expected = top.pending.pop()
                child = _open_child(fd, name, expected)
                if child is None:
                    continue
                os.close(fd)
                fd = child
                frames.append(_Frame(name, expected))
                total += _list(fd, device, frames[-1], seen)
                continue
            frames.pop()
            if not frames:
                break
            parent = _open_child(fd, "..", frames[-1].identity)
            if parent is None:
                parent, depth = _reopen(root_fd, frames)
                del frames[depth:]
            os.close(fd)
            fd = parent
    finally:
        os.close(fd)
    return total


def _list(fd: int, device: int, frame: _Frame, seen: set[_Identity]) -> int:
    """Count the entries of the directory open as ``fd`` (whose frame is ``frame``); queue its subdirectories
    on this filesystem not yet seen in ``frame.pending``."""
    total = 0
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    # On a descriptor, the entry's stat is fstatat(fd, name, AT_SYMLINK_NOFOLLOW).
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_dev != device:
                    continue  # a mount point: another filesystem's usage is not this tree's
                if stat.S_ISDIR(info.st_mode):
                    identity = (info.st_dev, info.st_ino)
                    if identity not in seen:
                        total += _count(info, seen)
                        frame.pending.append((entry.name, identity))
                else:
                    total += _count(info, seen)
    except OSError:
        pass  # the directory went, or holds an entry the kernel cannot list: what was counted stands
    return total


def _count(info: os.stat_result, seen: set[_Identity]) -> int:
    """``info``'s allocated bytes, unless its inode was counted already."""
    if stat.S_ISDIR(info.st_mode) or info.st_nlink > 1:
        identity = (info.st_dev, info.st_ino)
        if identity in seen:
            return 0
        seen.add(identity)
    # An inode with a single link is reached once by a walk that enters each directory once: no need to remember
    # it (a tree of millions of files keeps only its directories and hard-linked files in memory).
    return info.st_blocks * BLOCK


def _open_child(fd: int, name: str, expected: _Identity) -> int | None:
    """``name`` opened as a directory relative to ``fd``, if it still is the inode ``expected`` (else None)."""
    try:
        child = os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)
    except OSError:
        return None  # gone, replaced by a file, or by a symbolic link (O_NOFOLLOW: ELOOP)
    try:
        info = os.fstat(child)
    except OSError:
        os.close(child)
        return None
    if (info.st_dev, info.st_ino) != expected:
        os.close(child)
        return None
    return child


def _reopen(root_fd: int, frames: list[_Frame]) -> tuple[int, int]:
    """The deepest directory of ``frames`` still reachable from the root by their names (re-opened, checked) and
    how many frames that is (at least the root's)."""
    fd = os.dup(root_fd)
    for depth, frame in enumerate(frames[1:], start=1):
        child = _open_child(fd, frame.name, frame.identity)
        if child is None:
            return fd, depth
        os.close(fd)
        fd = child
    return fd, len(frames)


class DiskWatch:
    """Measures ``paths`` every ``interval`` seconds against ``limit_bytes``; calls ``on_exceeded(used)`` once,
    from the event loop, when usage exceeds the limit, and stops there.

    ``start()`` needs a running event loop; ``close()`` stops the watch (idempotent): ``on_exceeded`` is never
    called after it, though a measurement already running in its thread finishes there. ``exceeded`` is the usage
    that fired the watch (None until then); ``used`` the latest measurement (None before the first)."""

    def __init__(
        self,
        paths: Iterable[Path],
        limit_bytes: int,
        on_exceeded: Callable[[int], None],
        interval: float = 10.0,
    ) -> None:
        if limit_bytes < 0 or interval <= 0:
            raise ValueError(f"a disk watch needs a limit >= 0 and an interval > 0 (got {limit_bytes}, {interval})")
        self._paths = list(paths)
        self.limit_bytes = limit_bytes
        self.interval = interval
        self._on_exceeded = on_exceeded
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.exceeded: int | None = None
        self.used: int | None = None

    def add_path(self, path: Path) -> None:
        """Count ``path`` too from the next measurement on (a container's upper directory is known once created)."""
        if path not in self._paths:
            self._paths.append(path)

    @property
    def paths(self) -> list[Path]:
        return list(self._paths)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Measure now, then every ``interval`` seconds; a no-op once started or closed."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="disk watch")

    async def _run(self) -> None:
        while True:
            # A copy: add_path may run on the loop while the thread walks.
            used = await asyncio.to_thread(usage, list(self._paths))
            self.used = used
            if used > self.limit_bytes:
                self.exceeded = used
                try:
                    self._on_exceeded(used)
                except Exception:
                    log.exception("the disk watch's callback failed (usage %d bytes, limit %d)", used, self.limit_bytes)
                return
            await asyncio.sleep(self.interval)

    def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
