"""A running container's cgroups, read and written by the agent directly (cgroup v1 and v2).

The container engine puts each container in a cgroup of its own; the agent needs three things from it that
the engine's command line gives only slowly or not at all (ADR 0040):

* every process of the container, to signal the whole tree (``pids()``: a program's children that
  ``setsid`` or daemonise are still in its cgroup);
* the freezer, for a crash-consistent checkpoint (``freeze()``/``thaw()``): this is what ``podman pause``
  does, done synchronously, because the checkpoint protocol freezes and thaws without awaiting;
* the kernel's own count of OOM kills in the container (:class:`OomWatch`): podman 4.3 on a cgroup v1 host
  reports ``OOMKilled: false`` for a container the kernel OOM-killed, so the agent reads the memory
  controller's ``oom_kill`` counter itself. The counter lives in the container's cgroup, which the engine
  removes as soon as the container ends, so the watch registers an eventfd on ``memory.oom_control``
  (cgroup v1's OOM notification, sent as the kernel enters the OOM killer for the cgroup's limit) before the
  program runs; on cgroup v2 it polls the ``oom_kill`` count in ``memory.events``.

A container is found from its init process's host pid (``/proc/<pid>/cgroup``); every method tolerates the
cgroup having gone meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


class ContainerCgroup:
    """The cgroups of the container whose init process has host pid ``init_pid``."""

    def __init__(self, init_pid: int, root: Path = CGROUP_ROOT) -> None:
        self.init_pid = init_pid
        self._paths = _controller_paths(init_pid, root)

    def path(self, controller: str) -> Path | None:
        """The container's directory in ``controller`` (``""`` is the unified v2 hierarchy), or None."""
        return self._paths.get(controller)

    def pids(self) -> set[int]:
        """Host pids of every process in the container now (empty once it is gone)."""
        for controller in ("pids", "memory", "freezer", ""):
            directory = self.path(controller)
            if directory is None:
                continue
            try:
                return {int(pid) for pid in (directory / "cgroup.procs").read_text().split()}
            except OSError:
                continue
        return set()

    def freeze(self) -> bool:
        """Freeze every process of the container (the cgroup freezer); False when there is no freezer."""
        return self._freezer(frozen=True)

    def thaw(self) -> bool:
        """Undo :meth:`freeze`; harmless when nothing is frozen."""
        return self._freezer(frozen=False)

    def _freezer(self, *, frozen: bool) -> bool:
        v1 = self.path("freezer")
        try:
            if v1 is not None:
                (v1 / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
                return True
            v2 = self.path("")
            if v2 is not None and (v2 / "cgroup.freeze").exists():
                (v2 / "cgroup.freeze").write_text("1" if frozen else "0")
                return True
        except OSError as error:
            log.debug("freezer of container pid %d: %s", self.init_pid, error)
        return False

    def oom_kills(self) -> int | None:
        """The kernel's count of OOM kills in the container so far; None when it cannot be read."""
        v1 = self.path("memory")
        try:
            if v1 is not None:
                return _oom_kill_count((v1 / "memory.oom_control").read_text())
            v2 = self.path("")
            if v2 is not None:
                return _oom_kill_count((v2 / "memory.events").read_text())
        except OSError:
            return None
        return None


class OomWatch:
    """Counts OOM kills in a container while it runs; ``killed`` is True once the kernel OOM-killed in it.

    Start with :meth:`start` right after the container starts; :meth:`close` when it has ended (after one
    last read). Where no notification can be registered (cgroup v2, or a kernel refusing it) the count is
    polled every ``poll_seconds`` instead, and read once more at the end.
    """

    def __init__(self, cgroup: ContainerCgroup, poll_seconds: float = 0.5) -> None:
        self.cgroup = cgroup
        self._poll_seconds = poll_seconds
        self.killed = False
        self._event_fd: int | None = None
        self._control_fd: int | None = None
        self._poller: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._read()
        memory = self.cgroup.path("memory")
        if memory is not None:
            with contextlib.suppress(OSError):
                self._register(memory)
        if self._event_fd is None:
            self._poller = asyncio.create_task(self._poll())

    def _register(self, memory: Path) -> None:
        control = os.open(memory / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
        event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            (memory / "cgroup.event_control").write_text(f"{event} {control}")
        except OSError:
            os.close(event)
            os.close(control)
            raise
        self._event_fd, self._control_fd = event, control
        asyncio.get_running_loop().add_reader(event, self._notified)

    def _notified(self) -> None:
        # The kernel signals both an OOM and the cgroup's removal. It signals an OOM as it enters the OOM killer,
        # before the kill is counted (and the cgroup may be gone by the time the count moves): so a notification
        # while the cgroup still exists is the OOM kill itself; one after its removal reads ENODEV.
        if self._event_fd is not None:
            with contextlib.suppress(BlockingIOError, OSError):
                os.eventfd_read(self._event_fd)
        if self._control_fd is not None:
            with contextlib.suppress(OSError):
                os.pread(self._control_fd, 4096, 0)
                self.killed = True
        self._read()

    def _read(self) -> None:
        if self._control_fd is not None:
            try:
                count = _oom_kill_count(os.pread(self._control_fd, 4096, 0).decode())
            except OSError:  # ENODEV: the cgroup is gone
                count = None
        else:
            count = self.cgroup.oom_kills()
        if count:
            self.killed = True

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_seconds)
            self._read()

    def close(self) -> None:
        """A last read, then release the notification (idempotent)."""
        self._read()
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        if self._event_fd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._event_fd)
            os.close(self._event_fd)
            self._event_fd = None
        if self._control_fd is not None:
            os.close(self._control_fd)
            self._control_fd = None


def _oom_kill_count(text: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value)
    return 0


def _controller_paths(pid: int, root: Path) -> dict[str, Path]:
    """``{controller: directory}`` of ``pid``'s cgroups; ``""`` is the v2 (unified) hierarchy."""
    paths: dict[str, Path] = {}
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, relative = line.split(":", 2)
        for controller in controllers.split(","):
            if controller.startswith("name="):
                continue
            base = root / "unified" if not controller and (root / "unified").is_dir() else root
            directory = base / controller / relative.lstrip("/") if controller else base / relative.lstrip("/")
            if directory.is_dir():
                paths[controller] = directory
    return paths
