"""How the agent runs one attempt's command on its host: the runtime interface and the exit model.

A :class:`Runtime` starts a :class:`RunSpec` and hands back a :class:`Process`; the agent reads its
output with ``lines()``, ends it with ``stop()``/``kill()`` and learns how it ended from the
:class:`Exit`. Two runtimes implement it: ``bubblewrap`` (the default, a sandbox per attempt) and
``unsandboxed`` (a plain process group, only when asked for by name).

The exit model is exact, because Attempt status reports it (``exitCode``, ``signal``, reason):

- ``code`` is the program's own exit status and ``signal`` the signal that killed it; exactly one is
  set. The sandbox must never mask one as the other (a shell's ``128 + n`` is not a signal death).
- ``stopped`` says the agent asked for the end (``stop()`` or ``kill()`` was called before the end
  was seen). A stopped program may still exit 0 after SIGTERM; that is a clean stop, not a success.
- ``oom_killed``: the container runtime reads it from the kernel (the container's memory cgroup,
  ``nodus.agent.cgroups``). The bubblewrap runtime cannot see cgroup OOM events, so it uses the one
  signal that tells: a SIGKILL death the agent did not send is reported ``oom_killed=True`` (a person
  running ``kill -9`` by hand is misreported as OOM there).
- ``evicted``: the container runtime ended the program for exceeding its ephemeral disk
  (``EphemeralStorageExceeded``, ``nodus.agent.disk``).

What the sandbox adds to the command (each refused by ``unsandboxed`` with a StartFailed, since a
plain process could not honour it):

- :class:`Mount`: a host file or directory bound at a sandbox path, read-only or read-write.
- :class:`Egress`: ``Open`` shares the host's network; ``Deny`` gives the sandbox a network of its own
  with only loopback; ``AllowList`` does the same plus an HTTP proxy the agent runs per attempt
  (``nodus.agent.egress``) that lets through only the listed hosts, reached by the program through
  ``HTTP_PROXY``/``HTTPS_PROXY`` at ``http://127.0.0.1:3128``.
- :class:`Sidecar`: helper programs started, in order and each ready, before the program, in the same
  sandbox (same network, same ``/nodus``), and ended after it; their output arrives on streams of
  their own (see ``nodus.agent.bubblewrap`` for the readiness rule).

Start failures are not exits: a command that cannot be executed, or a sandbox that cannot be set up
for this attempt, raises :class:`StartFailed` (the attempt fails with that message); a runtime that
cannot work on this host at all raises :class:`RuntimeUnavailable` from :func:`select_runtime`.
"""

from __future__ import annotations

import abc
import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal, Protocol

from nodus.agent import egress
from nodus.agent.layout import SANDBOX_NODUS_DIR, AttemptLayout
from nodus.apimachinery.destinations import Policy

# A line longer than this is delivered in pieces, so one endless line cannot exhaust the agent's memory.
MAX_LINE_BYTES = 64 * 1024
# Output buffered per stream before the program blocks on write (the agent must consume lines()).
_PIPE_BUFFER_BYTES = 1024 * 1024
_READ_CHUNK_BYTES = 64 * 1024


class RuntimeUnavailable(Exception):
    """The requested runtime cannot run on this host. The message says why and what to do."""


class StartFailed(Exception):
    """This attempt could not be started (command not executable, sandbox set-up refused, bad spec).

    Raised by ``Runtime.start``; nothing is left running. The message is meant for the attempt's
    status: it names the command or quotes the sandbox's own error.
    """


# Sandbox paths that belong to the sandbox itself: no working directory or mount may land in them.
_RESERVED_SANDBOX_PATHS = ("/proc", "/dev", SANDBOX_NODUS_DIR)
# A sidecar's name becomes a file name (its ready file) and part of a stream name.
_SIDECAR_NAME = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Mount:
    """A host file or directory made visible at ``target`` inside the sandbox.

    The caller decides what may be mounted; the runtime only refuses targets the sandbox owns
    (``/``, ``/proc``, ``/dev``, ``/nodus`` and below). A target below a host directory that the
    sandbox shows read-only (``/usr/x``) cannot be created and fails the start.
    """

    source: Path
    """Host path, absolute; it must exist when the attempt starts."""
    target: str
    """Absolute path inside the sandbox; missing parents are created."""
    read_only: bool


@dataclass(frozen=True)
class Egress:
    """Where the program may connect to: ``spec.network.egress`` of the Job.

    ``allow`` holds host names (``pypi.org``) and ``*.suffix`` patterns (``*.example.com``: any
    name below ``example.com``, not ``example.com`` itself); ``presets`` name lists of hosts in
    :data:`nodus.agent.egress.PRESETS`. Both only apply to ``AllowList``. ``destinations`` is the
    agent's destination policy, which the AllowList proxy applies to the addresses of allowed names.
    """

    policy: Literal["Open", "Deny", "AllowList"] = "Open"
    allow: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()
    destinations: Policy = field(default_factory=Policy)


@dataclass(frozen=True)
class ContainerImage:
    """The image a container runtime runs an attempt's program (or a sidecar) in: pulled by
    ``nodus.agent.images`` before the start, named here by the engine's local id."""

    image_id: str
    reference: str
    """As the Job names it, pinned (``name@sha256:...``): for messages."""


@dataclass(frozen=True)
class Limits:
    """What the program may use at most; None is no limit. Enforced by container runtimes (ADR 0040)."""

    cpus: float | None = None
    memory_bytes: int | None = None
    pids: int | None = None
    disk_bytes: int | None = None
    """Ephemeral storage: the container's writable layer plus the attempt's writable /nodus directories."""


@dataclass(frozen=True)
class Sidecar:
    """A helper started before the program, in the same sandbox, and ended after it.

    ``env`` is its whole environment, as for the program; the runtime adds ``NODUS_READY_FILE``.
    ``startup_timeout`` bounds how long the start waits for it to become ready.
    """

    name: str
    argv: list[str]
    env: dict[str, str]
    startup_timeout: float = 300.0
    # Container runtimes only: its own image (None: the program's).
    image: ContainerImage | None = None


@dataclass(frozen=True)
class RunSpec:
    """What to run for one attempt.

    ``env`` is the program's whole environment: nothing of the agent's leaks in, so the caller puts
    ``PATH`` (and the environment contract) there. ``working_dir`` is a path inside the sandbox,
    e.g. ``/workspace``; it is backed by ``layout.workdir`` and is the program's cwd.
    """

    argv: list[str]
    env: dict[str, str]
    working_dir: str
    layout: AttemptLayout
    # Host directories the program must not see (the agent's credentials, the control plane's data
    # directory): the sandbox covers each with an empty tmpfs. The unsandboxed runtime cannot.
    hidden: tuple[str, ...] = ()
    # Bound after the /nodus directories, parents before children.
    mounts: tuple[Mount, ...] = ()
    egress: Egress = field(default_factory=Egress)
    # Started in this order, each ready before the next; see nodus.agent.bubblewrap for the rules.
    sidecars: tuple[Sidecar, ...] = ()
    # Container runtimes only (the host runtimes refuse a spec that sets them): the image, limits and the CDI
    # names of the devices (GPUs) the program is given.
    image: ContainerImage | None = None
    limits: Limits = field(default_factory=Limits)
    devices: tuple[str, ...] = ()
    # False: the working directory is the image's own (its WORKDIR), not backed by layout.workdir.
    bind_working_dir: bool = True
    # A gang rank: the pod shares the host's network namespace (ADR 0041), where its peers reach the rendezvous
    # and the collective traffic (NCCL picks its own ports) at the host's advertised address. Egress Open only.
    host_network: bool = False


@dataclass(frozen=True)
class Exit:
    """How a process ended. Exactly one of ``code`` and ``signal`` is set."""

    code: int | None
    signal: int | None
    oom_killed: bool
    stopped: bool
    # Why the runtime itself ended the program, when it did for a limit of its own (``EphemeralStorageExceeded``),
    # with what it measured; None otherwise.
    evicted: str | None = None
    evicted_message: str = ""

    @property
    def succeeded(self) -> bool:
        """The program ran to its end on its own and exited 0 (a clean exit after stop() is not a success)."""
        return self.code == 0 and not self.stopped

    @classmethod
    def from_returncode(cls, returncode: int, *, stop_requested: bool, agent_killed: bool) -> Exit:
        """Build an Exit from a subprocess-style return code (negative = killed by that signal).

        Applies the OOM rule of this module: SIGKILL that the agent did not send means the OOM killer.
        """
        if returncode >= 0:
            return cls(code=returncode, signal=None, oom_killed=False, stopped=stop_requested)
        number = -returncode
        oom = number == signal.SIGKILL and not agent_killed
        return cls(code=None, signal=number, oom_killed=oom, stopped=stop_requested)

    def __str__(self) -> str:
        if self.signal is None:
            text = f"exited with code {self.code}"
        else:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = "unknown signal"
            text = f"killed by signal {self.signal} ({name})"
        if self.oom_killed:
            text += ", by the out-of-memory killer"
        if self.evicted:
            text += f", evicted ({self.evicted_message or self.evicted})"
        if self.stopped:
            text += " after the agent stopped it"
        return text


class Process(Protocol):
    """One running attempt. Methods are safe to call in any order, repeatedly and concurrently."""

    pid: int
    """Host pid of the process the runtime started (bwrap itself for the sandbox)."""

    def lines(self) -> AsyncIterator[tuple[str, str]]:
        """Yield ``(stream, line)`` with stream ``"stdout"`` or ``"stderr"``, without the newline.

        A sidecar's lines come on ``"sidecar/<name>/stdout"`` and ``"sidecar/<name>/stderr"``.
        Ends when every stream is closed, i.e. once nothing in the sandbox can write any more; a
        last line without newline is included. Lines keep their order within a stream; across
        streams the order is as observed. Call it once and consume it: a program whose output
        is not read blocks once about 1 MiB per stream is buffered.
        """
        ...

    async def wait(self) -> Exit:
        """Wait for the end and return how it ended; the same Exit every time."""
        ...

    async def stop(self, grace_seconds: float) -> Exit:
        """SIGTERM every process of the attempt, wait up to ``grace_seconds``, then SIGKILL them all.

        Sidecars are asked to stop once the program has ended, as when it ends on its own.
        Idempotent: a second call joins the first; after the end it returns the Exit unchanged.
        The sequence completes even if the caller is cancelled.
        """
        ...

    async def kill(self) -> Exit:
        """SIGKILL every process of the attempt now and return the Exit."""
        ...

    def notify(self, number: int) -> None:
        """Send signal ``number`` to the program's processes (not its sidecars); nothing once it has ended."""
        ...

    def freeze(self) -> None:
        """Pause the program's processes (SIGSTOP), for a crash-consistent snapshot; :meth:`thaw` resumes them."""
        ...

    def thaw(self) -> None:
        """Resume what :meth:`freeze` paused (SIGCONT); harmless when nothing is paused."""
        ...


class Runtime(Protocol):
    name: str
    """``"bubblewrap"`` or ``"unsandboxed"``, as reported in Node ``status.runtime``."""

    async def start(self, spec: RunSpec) -> Process:
        """Start the command; returns once it runs (exec succeeded).

        Raises StartFailed for this attempt (nothing is left running), or RuntimeUnavailable when the
        runtime itself stopped working since it was selected (bwrap removed).
        """
        ...


def select_runtime(requested: str, work_dir: Path | None = None) -> Runtime:
    """The runtime for ``--runtime``: ``auto`` and ``podman`` run every attempt in its image and need a working
    podman (RuntimeUnavailable says why not); ``bubblewrap`` sandboxes programs on the host's filesystem without
    pulling images, ``unsandboxed`` runs them as plain processes (ADR 0040).

    ``auto`` never falls back to a runtime that ignores the image: running a Job on the host's filesystem instead of
    its image is a choice an operator makes by name.
    """
    # Imported here: the implementations import this module for the interface.
    from nodus.agent.bubblewrap import BubblewrapRuntime
    from nodus.agent.podman import PodmanRuntime
    from nodus.agent.unsandboxed import UnsandboxedRuntime

    if requested in ("auto", "podman"):
        return PodmanRuntime.probed(work_dir or Path("/var/lib/nodus/agent/engine"))
    if requested == "bubblewrap":
        return BubblewrapRuntime.probed()
    if requested == "unsandboxed":
        return UnsandboxedRuntime()
    raise ValueError(f"unknown runtime {requested!r}: use auto, podman, bubblewrap or unsandboxed")


def check_spec(spec: RunSpec) -> None:
    """Refuse a spec no runtime can run faithfully (StartFailed), before anything is started."""
    _check_command("the command", spec.argv, spec.env)
    path = PurePosixPath(spec.working_dir)
    if not path.is_absolute() or ".." in path.parts or str(path) == "/":
        raise StartFailed(f"workingDir {spec.working_dir!r} must be an absolute path below /")
    if _is_reserved(path):
        raise StartFailed(
            f"workingDir {spec.working_dir!r} is inside {', '.join(_RESERVED_SANDBOX_PATHS)}, which the sandbox owns"
        )
    targets = {path}
    for mount in spec.mounts:
        target = PurePosixPath(mount.target)
        if not target.is_absolute() or ".." in target.parts or str(target) == "/" or _is_reserved(target):
            raise StartFailed(
                f"mount target {mount.target!r} must be an absolute path below / and outside "
                f"{', '.join(_RESERVED_SANDBOX_PATHS)}"
            )
        if target in targets:
            raise StartFailed(f"mount target {mount.target!r} is already the working directory or another mount")
        targets.add(target)
        if not mount.source.is_absolute() or not mount.source.exists():
            raise StartFailed(f"mount source {str(mount.source)!r} for {mount.target!r} is not an existing host path")
    _check_egress(spec.egress)
    names: set[str] = set()
    for sidecar in spec.sidecars:
        if not _SIDECAR_NAME.fullmatch(sidecar.name):
            raise StartFailed(
                f"sidecar name {sidecar.name!r} must be lower-case letters, digits, '.', '_' or '-' (at most 63)"
            )
        if sidecar.name in names:
            raise StartFailed(f"sidecar name {sidecar.name!r} is used twice")
        names.add(sidecar.name)
        _check_command(f"sidecar {sidecar.name}", sidecar.argv, sidecar.env)
        if not sidecar.startup_timeout > 0:
            raise StartFailed(f"sidecar {sidecar.name}: startupTimeout must be positive")


def _check_command(what: str, argv: list[str], env: Mapping[str, str]) -> None:
    if not argv or not argv[0]:
        raise StartFailed(f"{what} is empty")
    if any("\0" in arg for arg in argv):
        raise StartFailed(f"{what} contains a NUL character")
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise StartFailed(f"environment variable name {name!r} or its value is not representable")


def _is_reserved(path: PurePosixPath) -> bool:
    return any(path == PurePosixPath(top) or path.is_relative_to(top) for top in _RESERVED_SANDBOX_PATHS)


def _check_egress(policy: Egress) -> None:
    if policy.policy not in ("Open", "Deny", "AllowList"):
        raise StartFailed(f"egress policy {policy.policy!r} is not Open, Deny or AllowList")
    if policy.policy != "AllowList" and (policy.allow or policy.presets):
        raise StartFailed(f"egress allow and presets only apply to the AllowList policy, not {policy.policy}")
    for name in policy.presets:
        if name not in egress.PRESET_NAMES:
            raise StartFailed(f"unknown egress preset {name!r}: use one of {', '.join(sorted(egress.PRESET_NAMES))}")
    for entry in policy.allow:
        if not egress.is_valid_pattern(entry):
            raise StartFailed(f"egress allow entry {entry!r} is not a host name or a *.suffix pattern")


async def open_pipe(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    """Read the pipe ``fd`` (taking ownership of it) through the event loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_PIPE_BUFFER_BYTES)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader, transport


async def merged_lines(streams: Mapping[str, asyncio.StreamReader]) -> AsyncIterator[tuple[str, str]]:
    """Lines of several streams as they arrive, tagged with the stream's name (see Process.lines)."""
    partial = dict.fromkeys(streams, b"")
    reads: dict[asyncio.Task[bytes], str] = {}

    def read_next(name: str) -> None:
        reads[asyncio.create_task(streams[name].read(_READ_CHUNK_BYTES))] = name

    for name in streams:
        read_next(name)
    try:
        while reads:
            done, _ = await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                name = reads.pop(task)
                chunk = task.result()
                if not chunk:
                    if partial[name]:
                        yield name, _decode(partial[name])
                    continue
                *complete, rest = (partial[name] + chunk).split(b"\n")
                for line in complete:
                    for piece in _pieces(line):
                        yield name, _decode(piece)
                # A partial line is held back only up to its last piece; the full pieces before it go now.
                kept = (len(rest) - 1) % MAX_LINE_BYTES + 1 if rest else 0
                if full := rest[: len(rest) - kept]:
                    for piece in _pieces(full):
                        yield name, _decode(piece)
                partial[name] = rest[len(rest) - kept :]
                read_next(name)
    finally:
        # Only cancel: this may run while the generator is being finalised, where awaiting is not allowed.
        for task in reads:
            task.cancel()


def _pieces(line: bytes) -> Iterator[bytes]:
    """``line`` cut into pieces of at most MAX_LINE_BYTES (an empty line stays one empty piece)."""
    yield line[:MAX_LINE_BYTES]
    for start in range(MAX_LINE_BYTES, len(line), MAX_LINE_BYTES):
        yield line[start : start + MAX_LINE_BYTES]


def _decode(line: bytes) -> str:
    # Programs print bytes, not always UTF-8; a log line must never fail to ship because of that.
    return line.decode("utf-8", errors="replace")


class HostProcess(abc.ABC):
    """The stop/kill/wait choreography both runtimes share; a subclass says how to signal and how it ended.

    Subclasses call :meth:`_watch` once constructed, implement :meth:`_signal` (to every process of the
    attempt) and :meth:`_until_ended` (awaits the end, builds the Exit from the two flags below).
    """

    def __init__(self, pid: int, streams: Mapping[str, asyncio.StreamReader]) -> None:
        self.pid = pid
        self._streams = streams
        self._stop_requested = False
        self._agent_killed = False
        self._ended: asyncio.Task[Exit] | None = None
        self._stopping: asyncio.Task[None] | None = None

    def _watch(self) -> None:
        self._ended = asyncio.create_task(self._until_ended())

    @abc.abstractmethod
    async def _until_ended(self) -> Exit: ...

    @abc.abstractmethod
    def _signal(self, number: int) -> None:
        """Send ``number`` to every process of the attempt that is still there; never raises for gone ones."""

    def _ended_task(self) -> asyncio.Task[Exit]:
        if self._ended is None:
            raise RuntimeError("HostProcess subclass did not call _watch()")
        return self._ended

    async def lines(self) -> AsyncIterator[tuple[str, str]]:
        async for item in merged_lines(self._streams):
            yield item

    async def wait(self) -> Exit:
        # Shielded: a caller giving up on waiting must not cancel the watch everybody else relies on.
        return await asyncio.shield(self._ended_task())

    async def stop(self, grace_seconds: float) -> Exit:
        if not self._ended_task().done() and self._stopping is None:
            self._stop_requested = True
            self._stopping = asyncio.create_task(self._terminate_then_kill(grace_seconds))
        return await self.wait()

    async def kill(self) -> Exit:
        if not self._ended_task().done():
            self._stop_requested = True
            self._agent_killed = True
            self._signal(signal.SIGKILL)
        return await self.wait()

    def notify(self, number: int) -> None:
        if not self._ended_task().done():
            self._signal(number)

    def freeze(self) -> None:
        self.notify(signal.SIGSTOP)

    def thaw(self) -> None:
        self.notify(signal.SIGCONT)

    async def _terminate_then_kill(self, grace_seconds: float) -> None:
        # A frozen program cannot act on SIGTERM: resume it first.
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self._ended_task()), timeout=max(grace_seconds, 0.0))
        except TimeoutError:
            self._agent_killed = True
            self._signal(signal.SIGKILL)
