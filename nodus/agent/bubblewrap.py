"""The bubblewrap runtime: each attempt in its own sandbox, with exact exits and whole-tree stops.

The sandbox (``bwrap``, Debian package ``bubblewrap``)::

    --unshare-pid --unshare-ipc     own PID namespace (the program is pid 3 and sees no host process)
    --unshare-net                   egress Deny and AllowList only: a network of its own, loopback only
    --die-with-parent               the sandbox dies with the agent, never orphaned
    --new-session                   setsid: no terminal to inject keystrokes into
    --cap-drop ALL                  when the agent is root, so is the program, but without capabilities
                                    (it cannot remount /nodus/inputs writable)
    --ro-bind /<entry> /<entry>     every top-level host entry (symlinks kept), read-only: images are
                                    not pulled by this runtime, so the host's interpreters and tools are
                                    what the command finds
    --proc /proc --dev /dev --tmpfs /tmp    private
    --tmpfs <layout root>           hides every attempt's directory (and secrets) from this one
    --tmpfs <hidden dir>, --ro-bind /dev/null <hidden file>
                                    the agent's credentials: its work dir (node credential), a join
                                    token file, a kubeconfig's directory and the files it names
    --ro-bind .../inputs|connections /nodus/..., --bind outputs|state|secrets|scratch
    --bind .../progress /nodus/progress       the progress protocol's file (nodus.agent.progress)
    --tmpfs /nodus/run              sidecars or AllowList only: writable, holds ready/<sidecar> files
    --ro-bind <attempt>/egress.sock /nodus/run/egress.sock    AllowList only: the agent's proxy
    --bind <workdir> <working_dir>, --ro-bind|--bind <mount source> <mount target>
                                    the working directory and RunSpec.mounts, parents before children
    --remount-ro / --chdir <working_dir>

The root is bwrap's own tmpfs with the host entries bound in, not one bind of the host ``/``,
because ``/nodus``, the working directory and mount targets must be created in it before it is made
read-only (so a mount at a new top-level path like ``/data`` works, one below the host's ``/usr``
does not).

bwrap reports a signal death as ``128 + n``, so it cannot say how the program ended. A tiny
supervisor (the agent's own Python, ``-I -S``) runs as the sandbox's pid 2: it reads argv and the
environment from a pipe (so secrets in the environment never appear in a host command line, and
Python's start-up locale coercion never reaches the program), starts the program and writes
``started`` then its exit status to a status pipe. The supervisor ignores SIGTERM and ``stop()``
skips it and bwrap's init (pid 1), so the status always arrives unless the agent kills. When the
program ends the supervisor exits, bwrap exits, and ``--die-with-parent`` takes the namespace (and
whatever the program left running) down with it.

Egress AllowList: before starting anything the supervisor listens on ``127.0.0.1:3128`` inside the
sandbox and forwards each connection byte for byte (a thread per direction) to the agent's
:class:`~nodus.agent.egress.EgressProxy` through the bound unix socket; the program and the sidecars
get ``HTTP_PROXY`` and friends pointing there. The proxy lives as long as the Process: started by
``start()``, closed once the sandbox is gone.

Sidecars (``RunSpec.sidecars``), native-sidecar style, in the same sandbox as the program:

- Started in order before the program, each with stdout and stderr pipes of its own (created by the
  agent, passed through bwrap), in a session of its own, with ``NODUS_READY_FILE`` set to
  ``/nodus/run/ready/<name>``. The next one (and finally the program) starts once it is ready.
- Ready means: its ready file exists, or, if it has not created one, it has been running for
  2 seconds without exiting. So a sidecar that needs longer to be useful must create the file when
  it is; ``startup_timeout`` bounds the wait (which the 2-second rule makes matter only below 2 s).
- It fails the start (``StartFailed("sidecar <name> failed to start: <why>")``, with nothing left
  running) when it cannot be executed, exits before it is ready, or is not ready in time.
- A sidecar that ends while the program runs is reported on the status pipe and logged by the
  agent; the program keeps running.
- When the program ends, for any reason, the supervisor SIGTERMs every sidecar's process group,
  waits up to 5 s, SIGKILLs them, and exits; so a sidecar never holds the attempt. The program's
  status is written as soon as it is known, so an agent SIGKILL during that wait cannot turn a clean
  exit into a kill; the Process ends (EOF on the status pipe) only once the sidecars are gone.

``stop()`` sends SIGTERM to every process whose parent chain leads to bwrap, found in /proc, so
children that ``setsid`` or re-parent to the namespace's init are reached too, except the sidecars
(and their children): as in Kubernetes, they are stopped after the program, by the supervisor, so a
program saving its state on SIGTERM still has them. ``kill()`` SIGKILLs the namespace's init, after
which the kernel kills every process in the namespace, sidecars included.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from nodus.agent import egress, runtime, supervisor
from nodus.agent.layout import NODUS_DIRECTORIES, PROGRESS_FILE, READ_ONLY_DIRECTORIES, SANDBOX_NODUS_DIR

logger = logging.getLogger(__name__)

_HOW_TO_FIX = (
    "install the Debian package bubblewrap (`make` runs .ci/install-system-packages) "
    "or start the agent with --runtime=unsandboxed"
)
# Sandbox paths that are not the host's.
_PRIVATE_TOP_LEVEL = frozenset({"proc", "dev", "tmp", PurePosixPath(SANDBOX_NODUS_DIR).name})
# Namespace pids that must survive SIGTERM: bwrap's init (1) and the supervisor (2).
_SANDBOX_KEEPERS = frozenset({1, 2})
# Passes over /proc when terminating, to reach children forked while the previous pass signalled.
_TERMINATE_PASSES = 3
# The sandbox's own writable run directory (sidecar ready files, the egress socket).
SANDBOX_RUN_DIR = f"{SANDBOX_NODUS_DIR}/run"
SANDBOX_READY_DIR = f"{SANDBOX_RUN_DIR}/ready"
SANDBOX_EGRESS_SOCKET = f"{SANDBOX_RUN_DIR}/egress.sock"
# Host side of the egress socket, in the attempt's directory (hidden from the sandbox with the layout root).
EGRESS_SOCKET_NAME = "egress.sock"


class BubblewrapRuntime:
    name = "bubblewrap"

    def __init__(self, bwrap: str, interpreter: str) -> None:
        self.bwrap = bwrap
        self.interpreter = interpreter

    @classmethod
    def probed(cls) -> BubblewrapRuntime:
        """The runtime, once a trial sandbox has run on this host (probed once per process).

        Raises RuntimeUnavailable with bwrap's own error when it cannot create namespaces here.
        Blocks for the trial run (tens of milliseconds): call it at agent start.
        """
        outcome = _probe()
        if isinstance(outcome, str):
            raise runtime.RuntimeUnavailable(outcome)
        return outcome

    async def start(self, spec: runtime.RunSpec) -> runtime.Process:
        runtime.check_spec(spec)
        proxy: egress.EgressProxy | None = None
        if spec.egress.policy == "AllowList":
            try:
                proxy = await egress.EgressProxy.start(
                    spec.layout.directory / EGRESS_SOCKET_NAME,
                    spec.egress.allow,
                    spec.egress.presets,
                    policy=spec.egress.destinations,
                )
            except (OSError, ValueError) as error:
                raise runtime.StartFailed(f"the egress proxy could not be started: {error}") from error
        try:
            return await self._start(spec, proxy)
        except BaseException:
            # From here on the Process owns the proxy; without one, nothing else will close it.
            if proxy is not None:
                proxy.close()
            raise

    async def _start(self, spec: runtime.RunSpec, proxy: egress.EgressProxy | None) -> BubblewrapProcess:
        control_read, control_write = os.pipe()
        status_read, status_write = os.pipe()
        pipes = _output_pipes(spec)
        sidecar_writes = [write for name, (_, write) in pipes.items() if name.startswith("sidecar/")]
        argv = sandbox_argv(
            self.bwrap,
            self.interpreter,
            spec,
            control_fd=control_read,
            status_fd=status_write,
            egress_socket=proxy.socket_path if proxy is not None else None,
        )
        control = _control_message(spec, {name: write for name, (_, write) in pipes.items()})
        unopened = [status_read, *(read for read, _ in pipes.values())]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=pipes["stdout"][1],
                stderr=pipes["stderr"][1],
                pass_fds=(control_read, status_write, *sidecar_writes),
                env={},
                # Out of the agent's process group: a Ctrl-C meant for the agent is the agent's to handle.
                start_new_session=True,
            )
        except OSError as error:
            for fd in (control_write, *unopened):
                os.close(fd)
            raise runtime.RuntimeUnavailable(f"cannot run {self.bwrap}: {error.strerror}; {_HOW_TO_FIX}") from error
        finally:
            for fd in (control_read, status_write, *(write for _, write in pipes.values())):
                os.close(fd)

        transports: list[asyncio.BaseTransport] = []
        control_sent = False
        try:
            status, transport = await runtime.open_pipe(unopened.pop(0))
            transports.append(transport)
            streams: dict[str, asyncio.StreamReader] = {}
            for name in pipes:
                streams[name], transport = await runtime.open_pipe(unopened.pop(0))
                transports.append(transport)
            control_sent = True
            await _send(control_write, control)
            sidecar_pids: set[int] = set()
            failure = ""
            while line := (await status.readline()).decode("utf-8", errors="replace").strip():
                kind, _, rest = line.partition(" ")
                if kind == "started":
                    return BubblewrapProcess(
                        proc, status, streams, proxy=proxy, sidecar_pids=sidecar_pids, name=spec.layout.directory.name
                    )
                if kind == "sidecar" and rest.split(" ", 2)[1] == "started":
                    sidecar_pids.add(int(rest.split(" ", 2)[2]))
                elif kind == "failed" or (kind == "sidecar" and rest.split(" ", 2)[1] == "failed"):
                    failure = line
                    break
            # The sandbox, a sidecar or the exec failed: everything is ending on its own; collect why.
            said = dict(
                zip(streams, await asyncio.gather(*(stream.read() for stream in streams.values())), strict=True)
            )
            await status.read()
            await proc.wait()
        except BaseException:
            # Cancelled or broken mid-start: leave nothing running (the sandbox dies with bwrap).
            _kill_quietly(proc.pid)
            if not control_sent:
                os.close(control_write)
            for fd in unopened:
                os.close(fd)
            for transport in transports:
                transport.close()
            raise
        raise _start_failure(spec, failure, said, proc.returncode)


class BubblewrapProcess(runtime.HostProcess):
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        status: asyncio.StreamReader,
        streams: Mapping[str, asyncio.StreamReader],
        *,
        proxy: egress.EgressProxy | None = None,
        sidecar_pids: set[int] | None = None,
        name: str = "",
    ) -> None:
        super().__init__(proc.pid, streams)
        self._proc = proc
        self._status = status
        self._proxy = proxy
        # Pids inside the sandbox: stop() leaves these (and their children) to the supervisor.
        self._sidecar_pids = frozenset(sidecar_pids or ())
        self._name = name
        self._watch()

    def _signal(self, number: int) -> None:
        if number == signal.SIGKILL:
            # The kernel kills every process of a PID namespace when its init dies.
            init = next((host for host, inner in _sandbox_processes(self.pid) if inner == 1), self.pid)
            _kill_quietly(init)
            return
        signalled: set[int] = set()
        for _ in range(_TERMINATE_PASSES):
            found = {
                host
                for host, inner in _sandbox_processes(self.pid, spared=self._sidecar_pids)
                if inner not in _SANDBOX_KEEPERS
            }
            if not found - signalled:
                return
            for host in found - signalled:
                _kill_quietly(host, number)
            signalled |= found

    async def _until_ended(self) -> runtime.Exit:
        reported: int | None = None
        try:
            # EOF on the status pipe comes once the whole sandbox is gone (bwrap's init holds it too).
            while line := (await self._status.readline()).decode("utf-8", errors="replace").strip():
                kind, _, rest = line.partition(" ")
                if kind == "exit":
                    reported = int(rest)
                elif kind == "sidecar":
                    sidecar, _, event = rest.partition(" ")
                    if event.startswith("ended "):
                        logger.warning(
                            "attempt %s: sidecar %s %s while the program runs",
                            self._name,
                            sidecar,
                            event.removeprefix("ended "),
                        )
            bwrap_returncode = await self._proc.wait()
        finally:
            if self._proxy is not None:
                self._proxy.close()
        if self._proxy is not None:
            await self._proxy.wait_closed()
        if reported is not None:
            returncode = reported
        elif self._agent_killed:
            returncode = -signal.SIGKILL
        else:
            # The supervisor died without reporting (the sandbox was killed from outside):
            # bwrap's own status is all there is, and it says 128 + n for a signal death.
            returncode = -(bwrap_returncode - 128) if bwrap_returncode > 128 else bwrap_returncode
        return runtime.Exit.from_returncode(
            returncode, stop_requested=self._stop_requested, agent_killed=self._agent_killed
        )


def sandbox_argv(
    bwrap: str,
    interpreter: str,
    spec: runtime.RunSpec,
    *,
    control_fd: int,
    status_fd: int,
    egress_socket: Path | None = None,
) -> list[str]:
    """The bwrap command line for ``spec`` (see the module docstring for each flag).

    ``egress_socket`` is the host path of the AllowList proxy's socket, bound at SANDBOX_EGRESS_SOCKET.
    """
    layout = spec.layout
    argv = [bwrap, *_base_flags(shared_network=spec.egress.policy == "Open")]
    if not Path(layout.root).is_relative_to("/tmp"):  # under /tmp it is hidden already
        argv += ["--tmpfs", str(layout.root)]
    for path in spec.hidden:
        # Credentials (the agent's work dir, a join token file, a kubeconfig and the files it names):
        # a directory becomes an empty tmpfs, a file an empty one.
        if Path(path).is_relative_to("/tmp"):
            continue
        if Path(path).is_dir():
            argv += ["--tmpfs", path]
        elif Path(path).is_file():
            argv += ["--ro-bind", "/dev/null", path]
    for name in NODUS_DIRECTORIES:
        bind = "--ro-bind" if name in READ_ONLY_DIRECTORIES else "--bind"
        argv += [bind, str(layout.nodus_dir / name), f"{SANDBOX_NODUS_DIR}/{name}"]
    if layout.progress.is_file():
        # One writable file in the otherwise read-only /nodus: the progress protocol (nodus.agent.progress).
        argv += ["--bind", str(layout.progress), PROGRESS_FILE]
    if spec.sidecars or egress_socket is not None:
        argv += ["--tmpfs", SANDBOX_RUN_DIR, "--dir", SANDBOX_READY_DIR]
    if egress_socket is not None:
        # Read-only is enough: connecting to a socket does not write to its file system.
        argv += ["--ro-bind", str(egress_socket), SANDBOX_EGRESS_SOCKET]
    binds = [("--bind", str(layout.workdir), spec.working_dir)]
    binds += [("--ro-bind" if mount.read_only else "--bind", str(mount.source), mount.target) for mount in spec.mounts]
    # Parents before children: a mount inside the working directory (or the reverse) must land on top.
    for flag, source, target in sorted(binds, key=lambda bind: len(PurePosixPath(bind[2]).parts)):
        argv += [flag, source, target]
    argv += ["--remount-ro", "/", "--chdir", spec.working_dir]
    # -W ignore: a warning from the supervisor would land in the program's stderr.
    return [
        *argv,
        "--",
        interpreter,
        "-I",
        "-S",
        "-W",
        "ignore",
        "-c",
        supervisor.SOURCE,
        str(control_fd),
        str(status_fd),
    ]


def _control_message(spec: runtime.RunSpec, fds: Mapping[str, int]) -> bytes:
    """What the supervisor reads from the control pipe: commands, environments and sidecar pipes."""
    allow_list = spec.egress.policy == "AllowList"
    proxy_env = egress.PROXY_ENV if allow_list else {}
    sidecars: list[dict[str, Any]] = [
        {
            "name": sidecar.name,
            "argv": sidecar.argv,
            "env": {**sidecar.env, **proxy_env, "NODUS_READY_FILE": f"{SANDBOX_READY_DIR}/{sidecar.name}"},
            "stdout": fds[_sidecar_stream(sidecar.name, "stdout")],
            "stderr": fds[_sidecar_stream(sidecar.name, "stderr")],
            "startup_timeout": sidecar.startup_timeout,
        }
        for sidecar in spec.sidecars
    ]
    message = {
        "argv": spec.argv,
        "env": {**spec.env, **proxy_env},
        "sidecars": sidecars,
        "egress_socket": SANDBOX_EGRESS_SOCKET if allow_list else None,
        "proxy_port": egress.PROXY_PORT,
    }
    return json.dumps(message).encode()


def _output_pipes(spec: runtime.RunSpec) -> dict[str, tuple[int, int]]:
    """A new pipe for every output stream of ``spec``, keyed by the stream's name, in the order the agent opens
    them: ``stdout`` and ``stderr`` of the program, then ``sidecar/<name>/stdout`` and ``.../stderr`` of each
    sidecar (see :func:`_sidecar_stream`). The caller owns every descriptor and closes it."""
    # (read end, write end) of every output stream: the program's, then each sidecar's.
    pipes = {"stdout": os.pipe(), "stderr": os.pipe()}
    for sidecar in spec.sidecars:
        for stream in ("stdout", "stderr"):
            pipes[_sidecar_stream(sidecar.name, stream)] = os.pipe()
    return pipes


def _start_failure(
    spec: runtime.RunSpec, failure: str, said: Mapping[str, bytes], bwrap_returncode: int | None
) -> runtime.StartFailed:
    """The error for a start that ended before the program started; returned, not raised.

    ``failure`` is the status line that ended the start (``sidecar <name> failed <why>`` or ``failed <why>``,
    from the supervisor), or empty when the status pipe closed without one: then bwrap could not set the
    sandbox up, and its stderr (else its exit status) says why. ``said`` is everything each output stream
    of :func:`_output_pipes` carried; a failed sidecar's last line of stderr is quoted.
    """
    if failure.startswith("sidecar "):
        _, name, _, why = failure.split(" ", 3)
        last = said[_sidecar_stream(name, "stderr")].decode("utf-8", errors="replace").strip().splitlines()
        return runtime.StartFailed(
            f"sidecar {name} failed to start: {why}" + (f" (it said: {last[-1]})" if last else "")
        )
    if failure.startswith("failed "):
        return runtime.StartFailed(f"cannot run {spec.argv[0]!r}: {failure.removeprefix('failed ')}")
    bwrap_said = said["stderr"].decode("utf-8", errors="replace").strip()
    return runtime.StartFailed(f"the sandbox could not be set up: {bwrap_said or f'bwrap exited {bwrap_returncode}'}")


def _sidecar_stream(name: str, stream: str) -> str:
    return f"sidecar/{name}/{stream}"


def _base_flags(*, shared_network: bool = True) -> list[str]:
    """Isolation, the read-only host root and the private /proc, /dev and /tmp: what every sandbox has."""
    flags = ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session"]
    if not shared_network:
        flags.append("--unshare-net")
    # Unprivileged bwrap already runs the program without capabilities in a user namespace;
    # as root it keeps them all unless told otherwise.
    if os.geteuid() == 0:
        flags += ["--cap-drop", "ALL"]
    for entry in sorted(os.scandir("/"), key=lambda entry: entry.name):
        if entry.name in _PRIVATE_TOP_LEVEL:
            continue
        if entry.is_symlink():
            flags += ["--symlink", os.readlink(entry.path), entry.path]
        elif entry.is_dir() or entry.is_file():
            flags += ["--ro-bind", entry.path, entry.path]
    return [*flags, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]


@functools.cache
def _probe() -> BubblewrapRuntime | str:
    """A working runtime, or why there is none: a trial sandbox with the same isolation as an attempt."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bwrap not found on PATH: {_HOW_TO_FIX}"
    # The supervisor runs on the agent's interpreter, seen through the read-only host root.
    interpreter = os.path.realpath(sys.executable)
    trial = [bwrap, *_base_flags(), "--remount-ro", "/", "--", interpreter, "-I", "-S", "-c", "pass"]
    try:
        result = subprocess.run(trial, stdin=subprocess.DEVNULL, capture_output=True, env={}, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap at {bwrap} could not run a trial sandbox ({error}); {_HOW_TO_FIX}"
    if result.returncode != 0:
        said = result.stderr.decode("utf-8", errors="replace").strip() or f"exit status {result.returncode}"
        return (
            f"bwrap at {bwrap} cannot create a sandbox on this host: {said}. "
            "It needs namespaces (root with CAP_SYS_ADMIN, or unprivileged user namespaces enabled); "
            "run the agent where they are allowed, or start it with --runtime=unsandboxed"
        )
    return BubblewrapRuntime(bwrap, interpreter)


def _sandbox_processes(bwrap_pid: int, spared: frozenset[int] = frozenset()) -> Iterator[tuple[int, int]]:
    """``(host pid, pid inside the sandbox)`` of every live descendant of bwrap, from /proc.

    Leaves out the processes whose pid inside the sandbox is in ``spared``, and their descendants.
    """
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name is in parentheses and may itself contain ") "; the ppid follows the last one.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    pending = list(children.get(bwrap_pid, ()))
    while pending:
        pid = pending.pop()
        inner = _inner_pid(pid)
        if inner in spared:
            continue
        pending += children.get(pid, ())
        if inner is not None:
            yield pid, inner


def _inner_pid(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])  # the last entry is the pid in the innermost namespace
    return None


def _kill_quietly(pid: int, number: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, number)


async def _send(fd: int, data: bytes) -> None:
    """Write ``data`` to the pipe ``fd`` and close it, without blocking the loop on a slow reader."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(fd, "wb", buffering=0))
    transport.write(data)
    transport.close()
