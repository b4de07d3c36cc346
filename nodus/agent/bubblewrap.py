"""The bubblewrap runtime: each attempt in its own sandbox, with exact exits and whole-tree stops.

The sandbox (``bwrap``, Debian package ``bubblewrap``)::

    --unshare-pid --unshare-ipc     own PID namespace (the program is pid 3 and sees no host process)
    --die-with-parent               the sandbox dies with the agent, never orphaned
    --new-session                   setsid: no terminal to inject keystrokes into
    --cap-drop ALL                  when the agent is root, so is the program, but without capabilities
                                    (it cannot remount /nodus/inputs writable)
    --ro-bind /<entry> /<entry>     every top-level host entry (symlinks kept), read-only: images are
                                    not pulled by this runtime, so the host's interpreters and tools are
                                    what the command finds
    --proc /proc --dev /dev --tmpfs /tmp    private
    --tmpfs <layout root>           hides every attempt's directory (and secrets) from this one
    --ro-bind .../inputs /nodus/inputs, --bind outputs|state|secrets|scratch
    --bind <workdir> <working_dir> --remount-ro / --chdir <working_dir>

The root is bwrap's own tmpfs with the host entries bound in, not one bind of the host ``/``,
because ``/nodus`` and the working directory must be created in it before it is made read-only.
The network is shared with the host for now (egress policy comes later).

bwrap reports a signal death as ``128 + n``, so it cannot say how the program ended. A tiny
supervisor (the agent's own Python, ``-I -S``) runs as the sandbox's pid 2: it reads argv and the
environment from a pipe (so secrets in the environment never appear in a host command line, and
Python's start-up locale coercion never reaches the program), forks and execs the program as pid 3,
and writes ``started`` then the raw wait status to a status pipe. The supervisor ignores SIGTERM and
``stop()`` skips it and bwrap's init (pid 1), so the status always arrives unless the agent kills.
When the program ends the supervisor exits, bwrap exits, and ``--die-with-parent`` takes the
namespace (and whatever the program left running) down with it.

``stop()`` sends SIGTERM to every process whose parent chain leads to bwrap, found in /proc, so
children that ``setsid`` or re-parent to the namespace's init are reached too; ``kill()`` SIGKILLs
the namespace's init, after which the kernel kills every process in the namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from nodus.agent import runtime
from nodus.agent.layout import NODUS_DIRECTORIES, SANDBOX_NODUS_DIR

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

# Runs inside the sandbox as pid 2: argv[1] is the control fd (JSON argv and env), argv[2] the status fd.
_SUPERVISOR = """\
import json, os, signal, sys
control, status = int(sys.argv[1]), int(sys.argv[2])
with os.fdopen(control, "rb") as source:
    spec = json.loads(source.read())
os.set_inheritable(status, False)
for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, signal.SIG_IGN)
ready, failed = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(ready)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_DFL)
    try:
        os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
    except (OSError, ValueError) as error:
        os.write(failed, str(getattr(error, "strerror", None) or error).encode())
    os._exit(127)
os.close(failed)
why = os.read(ready, 4096)
if why:
    os.waitpid(pid, 0)
    os.write(status, b"failed " + why + b"\\n")
    sys.exit(0)
os.write(status, b"started %d\\n" % pid)
os.write(status, b"exit %d\\n" % os.waitpid(pid, 0)[1])
"""


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
        control_read, control_write = os.pipe()
        status_read, status_write = os.pipe()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        argv = sandbox_argv(self.bwrap, self.interpreter, spec, control_fd=control_read, status_fd=status_write)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=out_write,
                stderr=err_write,
                pass_fds=(control_read, status_write),
                env={},
                # Out of the agent's process group: a Ctrl-C meant for the agent is the agent's to handle.
                start_new_session=True,
            )
        except OSError as error:
            for fd in (control_write, status_read, out_read, err_read):
                os.close(fd)
            raise runtime.RuntimeUnavailable(f"cannot run {self.bwrap}: {error.strerror}; {_HOW_TO_FIX}") from error
        finally:
            for fd in (control_read, status_write, out_write, err_write):
                os.close(fd)

        transports: list[asyncio.BaseTransport] = []
        control_sent = False
        try:
            status, transport = await runtime.open_pipe(status_read)
            transports.append(transport)
            stdout, transport = await runtime.open_pipe(out_read)
            transports.append(transport)
            stderr, transport = await runtime.open_pipe(err_read)
            transports.append(transport)
            control_sent = True
            await _send(control_write, json.dumps({"argv": spec.argv, "env": spec.env}).encode())
            first = await status.readline()
            if first.startswith(b"started "):
                return BubblewrapProcess(proc, status, {"stdout": stdout, "stderr": stderr})
            # The sandbox or the exec failed: everything is ending on its own; collect why.
            said = (await stderr.read()).decode("utf-8", errors="replace").strip()
            await stdout.read()
            await status.read()
            await proc.wait()
        except BaseException:
            # Cancelled or broken mid-start: leave nothing running (the sandbox dies with bwrap).
            _kill_quietly(proc.pid)
            if not control_sent:
                os.close(control_write)
            for transport in transports:
                transport.close()
            raise
        if first.startswith(b"failed "):
            why = first.removeprefix(b"failed ").decode("utf-8", errors="replace").strip()
            raise runtime.StartFailed(f"cannot run {spec.argv[0]!r}: {why}")
        raise runtime.StartFailed(f"the sandbox could not be set up: {said or f'bwrap exited {proc.returncode}'}")


class BubblewrapProcess(runtime.HostProcess):
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        status: asyncio.StreamReader,
        streams: Mapping[str, asyncio.StreamReader],
    ) -> None:
        super().__init__(proc.pid, streams)
        self._proc = proc
        self._status = status
        self._watch()

    def _signal(self, number: int) -> None:
        if number == signal.SIGKILL:
            # The kernel kills every process of a PID namespace when its init dies.
            init = next((host for host, inner in _sandbox_processes(self.pid) if inner == 1), self.pid)
            _kill_quietly(init)
            return
        signalled: set[int] = set()
        for _ in range(_TERMINATE_PASSES):
            found = {host for host, inner in _sandbox_processes(self.pid) if inner not in _SANDBOX_KEEPERS}
            if not found - signalled:
                return
            for host in found - signalled:
                _kill_quietly(host, number)
            signalled |= found

    async def _until_ended(self) -> runtime.Exit:
        # EOF on the status pipe comes once the whole sandbox is gone (bwrap's init holds it too).
        report = await self._status.read()
        bwrap_returncode = await self._proc.wait()
        if report.startswith(b"exit "):
            returncode = os.waitstatus_to_exitcode(int(report.split()[1]))
        elif self._agent_killed:
            returncode = -signal.SIGKILL
        else:
            # The supervisor died without reporting (the sandbox was killed from outside):
            # bwrap's own status is all there is, and it says 128 + n for a signal death.
            returncode = -(bwrap_returncode - 128) if bwrap_returncode > 128 else bwrap_returncode
        return runtime.Exit.from_returncode(
            returncode, stop_requested=self._stop_requested, agent_killed=self._agent_killed
        )


def sandbox_argv(bwrap: str, interpreter: str, spec: runtime.RunSpec, *, control_fd: int, status_fd: int) -> list[str]:
    """The bwrap command line for ``spec`` (see the module docstring for each flag)."""
    layout = spec.layout
    argv = [bwrap, *_base_flags()]
    if not Path(layout.root).is_relative_to("/tmp"):  # under /tmp it is hidden already
        argv += ["--tmpfs", str(layout.root)]
    for path in spec.hidden:
        if Path(path).is_dir() and not Path(path).is_relative_to("/tmp"):
            argv += ["--tmpfs", path]
    for name in NODUS_DIRECTORIES:
        bind = "--ro-bind" if name == "inputs" else "--bind"
        argv += [bind, str(layout.nodus_dir / name), f"{SANDBOX_NODUS_DIR}/{name}"]
    argv += ["--bind", str(layout.workdir), spec.working_dir, "--remount-ro", "/", "--chdir", spec.working_dir]
    return [*argv, "--", interpreter, "-I", "-S", "-c", _SUPERVISOR, str(control_fd), str(status_fd)]


def _base_flags() -> list[str]:
    """Isolation, the read-only host root and the private /proc, /dev and /tmp: what every sandbox has."""
    flags = ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session"]
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


def _sandbox_processes(bwrap_pid: int) -> Iterator[tuple[int, int]]:
    """``(host pid, pid inside the sandbox)`` of every live descendant of bwrap, from /proc."""
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
        pending += children.get(pid, ())
        inner = _inner_pid(pid)
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
