"""Files of the program's tree, reached from a trusted directory without following a link the program planted.

The program writes its tree (``/nodus/outputs``, ``/nodus/state``, the working directory, a writable
Volume) as the agent's own user; the agent later reads and writes the same tree on the host, as the
same user or root. A host path the agent builds from the program's names (``<attempt>/workdir/model``)
must therefore never take it through a symbolic link the program left, nor onto a fifo or a device:
the agent would upload, overwrite or truncate whatever host file the link names (ADR 0031).

**Contract.** Every function takes a :class:`Location`: a *base* directory the agent trusts (one the
program cannot rename or replace: the source of a bind mount, or the agent's own directory), the
components below it, and how the program names the base (for messages). The base is opened by path;
each component below it is opened with ``openat(parent, name, O_NOFOLLOW | O_CLOEXEC)``, with
``O_DIRECTORY`` for all but the last, so:

* a symbolic link at any component below the base raises :class:`UnsafePath`, never followed;
* so does a non-directory where a directory is needed, or anything but a regular file where a
  file is wanted (a fifo is opened ``O_NONBLOCK`` and refused, so it cannot hang the agent);
* a component swapped for a link between two calls is caught at the next open, not followed;
* a name that is not one component (empty, ``.``, ``..``, holding ``/`` or NUL) is refused.

A missing component raises ``FileNotFoundError``; callers decide whether that is an error.

**Writing.** A file the agent writes into the program's tree is never opened by its final name: a
temporary name is created ``O_CREAT | O_EXCL | O_NOFOLLOW`` through the parent's descriptor, written,
and renamed over the final name with ``renameat``, which replaces a link planted there, never its
target. Removal is ``unlinkat`` through the parent, which removes a link, never its target.

Everything here is blocking filesystem work: call it from a worker thread in async code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a fifo for reading would otherwise wait for a writer, forever.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMPORARY_TRIES = 8


class UnsafePath(Exception):
    """A path leads through a symbolic link, or names something other than what was wanted.

    ``path`` is the offending path as the program names it (``/nodus/outputs/x``)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path = path


def is_name(name: str) -> bool:
    """Whether ``name`` is one path component: not empty, ``.`` or ``..``, without ``/`` or NUL."""
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


@dataclass(frozen=True)
class Location:
    """``base`` (a host directory the agent trusts) and the components ``parts`` below it.

    ``shown`` is how the program names ``base`` (``/nodus/outputs``); messages name every path that
    way, so a host path never reaches a status message. It defaults to the host path itself."""

    base: Path
    parts: tuple[str, ...] = ()
    shown: str = ""

    def __post_init__(self) -> None:
        for name in self.parts:
            if not is_name(name):
                raise UnsafePath(self._show(self.parts), f"has the component {name!r}, which is not a name")

    @property
    def host(self) -> Path:
        """The host path, for the agent's own use (never for opening: use this module's functions)."""
        return self.base.joinpath(*self.parts)

    @property
    def name(self) -> str:
        """The last component; ValueError for the base itself."""
        if not self.parts:
            raise ValueError("the base of a Location has no name below it")
        return self.parts[-1]

    @property
    def parent(self) -> Location:
        """The location of the directory holding :attr:`name`."""
        self.name  # noqa: B018 - raises for the base
        return Location(self.base, self.parts[:-1], self.shown)

    def child(self, *names: str) -> Location:
        return Location(self.base, (*self.parts, *names), self.shown)

    def __str__(self) -> str:
        return self._show(self.parts)

    def _show(self, parts: tuple[str, ...]) -> str:
        top = (self.shown or str(self.base)).rstrip("/")
        return "/".join((top, *parts)) if parts else (top or "/")


def location(path: Path | Location) -> Location:
    """``path`` as a Location: a Location as it is; a bare host path as its last component below its parent,
    which is trusted (so a link at the last component is still refused)."""
    if isinstance(path, Location):
        return path
    return Location(path.parent, (path.name,)) if path.name else Location(path)


def pinned(directory: int) -> Path:
    """A path that names the open ``directory`` itself, whatever becomes of the names above it
    (``/proc/self/fd/N``): for code that works with paths below a directory this module opened."""
    return Path(f"/proc/self/fd/{directory}")


def open_directory(location: Location, *, create: bool = False, mode: int = 0o755) -> int:
    """A descriptor of the directory at ``location`` (close it). With ``create``, missing components
    are made (with ``mode``) one at a time, each through its parent's descriptor (and a missing base by
    its path: it is trusted)."""
    if create:
        location.base.mkdir(parents=True, exist_ok=True)
    base = os.open(location.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return descend(base, location.parts, location.shown or str(location.base), create=create, mode=mode)
    finally:
        os.close(base)


def descend(directory: int, parts: tuple[str, ...], shown: str, *, create: bool = False, mode: int = 0o755) -> int:
    """A new descriptor of the directory ``parts`` below the open ``directory`` (which stays open);
    ``shown`` names ``directory`` in messages. See :func:`open_directory`."""
    location = Location(Path("/"), parts, shown)  # checks the names; only used for messages
    fd = os.dup(directory)
    try:
        for depth, name in enumerate(parts, start=1):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=fd)
            try:
                child = os.open(name, _DIRECTORY, dir_fd=fd)
            except OSError as exc:
                raise _refusal(location, depth, fd, exc, "a directory") from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_entry(location: Location) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file or directory at ``location``, and its status.
    Anything else (a link, a fifo, a device, a socket) raises :class:`UnsafePath`."""
    if not location.parts:
        fd = open_directory(location)
        return fd, os.fstat(fd)
    parent = open_directory(location.parent)
    try:
        return open_entry_at(parent, location.name, str(location))
    finally:
        os.close(parent)


def open_entry_at(directory: int, name: str, shown: str) -> tuple[int, os.stat_result]:
    """:func:`open_entry` of ``name`` in the open ``directory``; ``shown`` names it in messages."""
    # Look before opening, so that a device is never opened (opening one may act), then check that what
    # was opened is what was looked at.
    try:
        before = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror, shown) from None
    _check_kind(before, shown)
    try:
        fd = os.open(name, _READ, dir_fd=directory)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(shown, "is a symbolic link, which is never followed") from None
        raise type(exc)(exc.errno, exc.strerror, shown) from None
    status = os.fstat(fd)
    if (status.st_dev, status.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise UnsafePath(shown, "was replaced while it was being opened")
    return fd, status


def _check_kind(status: os.stat_result, shown: str) -> None:
    if stat.S_ISLNK(status.st_mode):
        raise UnsafePath(shown, "is a symbolic link, which is never followed")
    if not (stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)):
        raise UnsafePath(shown, "is not a regular file or directory")


def open_file(location: Location) -> int:
    """A read-only descriptor of the regular file at ``location`` (close it)."""
    fd, status = open_entry(location)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        raise UnsafePath(str(location), "is a directory, not a regular file")
    return fd


def read_file(location: Location, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file at ``location``; None when it does not exist."""
    try:
        fd = open_file(location)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def lstat(location: Location) -> os.stat_result:
    """The status of ``location`` itself (a link is described, not followed)."""
    if not location.parts:
        return os.stat(location.base)
    parent = open_directory(location.parent)
    try:
        return os.stat(location.name, dir_fd=parent, follow_symlinks=False)
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror, str(location)) from None
    finally:
        os.close(parent)


def readlink(location: Location) -> str:
    """The target of the symbolic link at ``location`` (read, never followed)."""
    parent = open_directory(location.parent)
    try:
        return os.readlink(location.name, dir_fd=parent)
    finally:
        os.close(parent)


def create_at(directory: int, name: str, mode: int = 0o644) -> int:
    """A new file ``name`` in the open ``directory``, for writing: ``O_CREAT | O_EXCL | O_NOFOLLOW``,
    so an existing name (a link the program planted included) raises ``FileExistsError``."""
    return os.open(name, _CREATE, mode, dir_fd=directory)


def write_file(location: Location, data: bytes, mode: int = 0o644) -> None:
    """Make ``location`` a regular file holding exactly ``data``, atomically: whoever opens the name sees
    the old file or the new one. Whatever was at the name (a file, a planted link) is replaced; a
    directory there raises :class:`UnsafePath`. ``mode`` is set exactly (the umask does not apply)."""
    parent = open_directory(location.parent)
    try:
        write_at(parent, location.name, data, mode, str(location))
    finally:
        os.close(parent)


def write_at(directory: int, name: str, data: bytes, mode: int, shown: str) -> None:
    """:func:`write_file` of ``name`` in the open ``directory``."""
    fd, temporary = _temporary(directory, name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        try:
            os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        except IsADirectoryError:
            raise UnsafePath(shown, "is a directory; a file was expected there") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise


def remove(location: Location) -> bool:
    """Remove the name at ``location`` (a link itself, never its target); False if it was not there.
    A directory there raises :class:`UnsafePath`."""
    try:
        parent = open_directory(location.parent)
    except FileNotFoundError:
        return False
    try:
        os.unlink(location.name, dir_fd=parent)
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        raise UnsafePath(str(location), "is a directory; a file was expected there") from None
    finally:
        os.close(parent)
    return True


@dataclass(frozen=True)
class Entry:
    """One entry of :func:`walk`: its path relative to the walked directory (``a/b.txt``), its status
    (not followed), and ``directory``, the open descriptor of its parent, valid until the walk moves on."""

    relative: str
    status: os.stat_result
    directory: int
    name: str


def walk(directory: int, shown: str, prefix: str = "") -> Iterator[Entry]:
    """Every entry under the open ``directory``, depth first, names sorted, links not followed (they are
    entries, never descended into). A subdirectory swapped for a link during the walk raises
    :class:`UnsafePath`. ``shown`` names ``directory`` in messages. The caller keeps ``directory`` open."""
    with os.scandir(directory) as scan:
        names = sorted(entry.name for entry in scan)
    for name in names:
        try:
            status = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed since the directory was read
        relative = prefix + name
        yield Entry(relative, status, directory, name)
        if stat.S_ISDIR(status.st_mode):
            try:
                child = os.open(name, _DIRECTORY, dir_fd=directory)
            except OSError as exc:
                where = Location(Path("/"), tuple(relative.split("/")), shown)
                raise _refusal(where, None, directory, exc, "a directory") from None
            try:
                yield from walk(child, shown, relative + "/")
            finally:
                os.close(child)


def _temporary(directory: int, name: str) -> tuple[int, str]:
    """A new file beside ``name`` under a random name no one could have planted a link at in advance."""
    for _ in range(_TEMPORARY_TRIES):
        temporary = f".{name[:200]}.{secrets.token_hex(6)}.nodus-tmp"
        with contextlib.suppress(FileExistsError):
            return create_at(directory, temporary, 0o600), temporary
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside {name}")


def _refusal(location: Location, depth: int | None, parent: int, exc: OSError, wanted: str) -> Exception:
    """The error for a component that could not be opened as ``wanted``: UnsafePath for a link or a
    non-directory, the OSError itself (with the shown path) otherwise."""
    parts = location.parts if depth is None else location.parts[:depth]
    shown = location._show(parts)
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            status = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except OSError:
            status = None
        if status is not None and stat.S_ISLNK(status.st_mode):
            return UnsafePath(shown, "is a symbolic link, which is never followed")
        return UnsafePath(shown, f"is not {wanted}")
    return type(exc)(exc.errno, exc.strerror, shown)
