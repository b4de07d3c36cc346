"""Restoring a checkpoint: making the roots exactly a manifest's trees, all or nothing.

**Restoring** (:class:`Restoration`, :func:`restore_into`) builds each root's new tree in a
temporary sibling of the root, writing chunks as they arrive after checking their sha256, and only
when every chunk has arrived swaps the siblings in (rename the old root aside, rename the new one
in, delete the old). A damaged or missing chunk therefore leaves the roots exactly as they were and
no sibling behind. After a swap the roots hold exactly the checkpoint: whatever else was in them is
gone. ``nodus.agent.snapshots.Mirror.seed`` then teaches the mirror the restored files, so that the
first checkpoint after a restore copies and uploads only what changed since.

**Safety.** The roots belong to the program, which runs as the agent's user but sees only its
sandbox; it must not get the agent to write a host path outside the roots. So a manifest whose
entries are not under its roots, or whose entries are not all inside directory entries (no file
"inside" a symbolic link), is refused (:meth:`~nodus.agent.manifests.Manifest.check`), and symbolic
links are recreated but never followed. Each root is reached from the trusted host directory behind
its mount one component at a time without following links (``nodus.agent.hostfiles``): the directory
that holds a root is opened (and made, if missing) that way and every later step works through its
descriptor, so a root whose path leads through a link fails the restore (:class:`RestoreFailed`) rather
than writing where the link points (ADR 0031). Modes are kept, except set-user-ID and set-group-ID bits,
which a restore drops; modification times and owners are not kept.

Everything here is blocking filesystem work: call it from a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from nodus.agent import hostfiles
from nodus.agent.manifests import Manifest, root_of

_RESTORED_MODE_BITS = 0o1777  # no set-user-ID or set-group-ID bits from a checkpoint


class RestoreFailed(Exception):
    """A restore could not complete: a chunk is damaged or missing, or the disk refused a write."""


class Restoration:
    """One restore: the manifest's trees built in temporary siblings of the roots (``.nodus-restore-*``
    beside each), filled by :meth:`write` chunk by chunk, swapped in by :meth:`commit`.

    ``roots`` maps each of the manifest's paths to where it is on the host: a
    :class:`~nodus.agent.hostfiles.Location` below a trusted directory, or a host path whose parent is
    trusted (more roots are left alone). Until
    :meth:`commit`, the roots are untouched; :meth:`abort` (or leaving a ``with`` block without a
    commit) removes the siblings. :meth:`write` may be called from several threads at once. The swap
    renames each root, so restore before the sandbox binds them (a mount point cannot be renamed);
    with several roots, a failure during the swaps leaves the roots already swapped restored.
    """

    def __init__(self, manifest: Manifest, roots: Mapping[str, Path | hostfiles.Location]) -> None:
        manifest.check()
        missing = [path for path in manifest.paths if path not in roots]
        if missing:
            raise RestoreFailed(f"the checkpoint saved {missing}, which are not among the paths to restore")
        self.manifest = manifest
        self._roots = {path: _below_parent(hostfiles.location(roots[path])) for path in manifest.paths}
        self._token = secrets.token_hex(4)
        # The open directory holding each root; every path of the restore is below one of these.
        self._parents: dict[str, int] = {}
        self._siblings: dict[str, Path] = {}
        self._places: dict[str, list[tuple[Path, int, int, str]]] = {}  # digest -> (file, offset, length, path)
        self._modes: list[tuple[Path, int]] = []
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        try:
            self._build()
        except hostfiles.UnsafePath as exc:
            self.abort()
            raise RestoreFailed(f"{exc}: checkpoint paths are restored without following symbolic links") from None
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
            name, parent = self._roots[root].name, self._parents[root]
            old = f".nodus-restore-{self._token}-old"  # removed before the next root's swap
            try:
                os.rename(name, old, src_dir_fd=parent, dst_dir_fd=parent)
            except FileNotFoundError:
                moved = False
            else:
                moved = True
            os.rename(sibling.name, name, src_dir_fd=parent, dst_dir_fd=parent)
            del self._siblings[root]
            if moved:
                _remove(hostfiles.pinned(parent) / old)

    def abort(self) -> None:
        """Remove what was built and not swapped in; the roots stay as they were. Idempotent (and what
        leaving a ``with`` block does after a commit: it lets go of the roots' directories)."""
        for sibling in self._siblings.values():
            with contextlib.suppress(OSError):
                _remove(sibling)
        self._siblings.clear()
        for parent in self._parents.values():
            os.close(parent)
        self._parents.clear()

    def _build(self) -> None:
        """Create the directories, symbolic links and (sparse, full-size) files of every new tree."""
        size = self.manifest.chunk_size
        for n, root in enumerate(self.manifest.paths):
            parent = hostfiles.open_directory(self._roots[root].parent, create=True)
            self._parents[root] = parent
            # Reached through the open directory, whatever the program may have done to the names above it.
            self._siblings[root] = hostfiles.pinned(parent) / f".nodus-restore-{self._token}-{n}"
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


def restore_into(
    manifest: Manifest, roots: Mapping[str, Path | hostfiles.Location], read_chunk: Callable[[str], bytes]
) -> None:
    """Make the roots exactly ``manifest``'s trees, reading each chunk once with ``read_chunk(digest)``.

    All or nothing (see :class:`Restoration`): on any failure (:class:`RestoreFailed` for a damaged
    chunk, :class:`~nodus.agent.manifests.ManifestInvalid` for a manifest that does not
    :meth:`~Manifest.check`, or whatever ``read_chunk`` raises) the roots are left as they were.
    """
    with Restoration(manifest, roots) as restoration:
        for digest in restoration.needed():
            restoration.write(digest, read_chunk(digest))
        restoration.commit()


def _below_parent(location: hostfiles.Location) -> hostfiles.Location:
    """``location`` with at least one component: a root that is a trusted base itself is renamed in its parent."""
    if location.parts:
        return location
    return hostfiles.Location(location.base.parent, (location.base.name,), location.shown.rpartition("/")[0])


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
