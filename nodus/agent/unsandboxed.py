"""The unsandboxed runtime: the command as a plain host process, for hosts where bubblewrap cannot run.

Only used when the agent is started with ``--runtime=unsandboxed``; ``auto`` never picks it, since
the program then runs with the agent's own user and sees the whole host. What still holds:

- the environment is exactly ``RunSpec.env`` and stdin is /dev/null;
- the cwd is the layout's host ``workdir`` (``RunSpec.working_dir`` is a sandbox path and has no
  meaning here, nor has ``/nodus/``: the program must find its directories another way);
- the program leads its own process group; stop() and kill() signal that group, and when the
  program ends whatever it left in the group is killed, as the sandbox kills its namespace.
  A process that leaves the group (``setsid``) escapes both, which the sandbox does not allow.

What only a sandbox can do is refused with StartFailed rather than silently skipped: mounts (there is
no private file system view to bind them into), egress ``Deny`` and ``AllowList`` (the program shares
the host's network, so nothing could hold it to the policy) and sidecars (they need the shared
sandbox their contract promises: the same ``/nodus``, the same loopback network).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping

from nodus.agent import runtime


class UnsandboxedRuntime:
    name = "unsandboxed"

    async def start(self, spec: runtime.RunSpec) -> runtime.Process:
        runtime.check_spec(spec)
        _refuse_what_needs_a_sandbox(spec)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            # Our own pipes rather than asyncio's PIPE: wait() must not hang on a grandchild holding them.
            proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=out_write,
                stderr=err_write,
                env=spec.env,
                cwd=spec.layout.workdir,
                start_new_session=True,
            )
        except OSError as error:
            os.close(out_read)
            os.close(err_read)
            # subprocess names the missing path, which is the cwd rather than the command when that is missing.
            where = f"{error.filename}: " if error.filename not in (None, spec.argv[0]) else ""
            raise runtime.StartFailed(f"cannot run {spec.argv[0]!r}: {where}{error.strerror or error}") from error
        finally:
            os.close(out_write)
            os.close(err_write)
        stdout, _ = await runtime.open_pipe(out_read)
        stderr, _ = await runtime.open_pipe(err_read)
        return UnsandboxedProcess(proc, {"stdout": stdout, "stderr": stderr})


class UnsandboxedProcess(runtime.HostProcess):
    def __init__(self, proc: asyncio.subprocess.Process, streams: Mapping[str, asyncio.StreamReader]) -> None:
        super().__init__(proc.pid, streams)
        self._proc = proc
        self._watch()

    def _signal(self, number: int) -> None:
        # The group outlives its leader while members remain, so this also reaches leftovers.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, number)

    async def _until_ended(self) -> runtime.Exit:
        returncode = await self._proc.wait()
        self._signal(signal.SIGKILL)
        return runtime.Exit.from_returncode(
            returncode, stop_requested=self._stop_requested, agent_killed=self._agent_killed
        )


def _refuse_what_needs_a_sandbox(spec: runtime.RunSpec) -> None:
    if spec.mounts:
        raise runtime.StartFailed("mounts need the bubblewrap runtime: this agent runs unsandboxed")
    if spec.egress.policy != "Open":
        raise runtime.StartFailed(
            f"egress policy {spec.egress.policy} needs the bubblewrap runtime: this agent runs unsandboxed, "
            "sharing the host's network, and cannot enforce it"
        )
    if spec.sidecars:
        raise runtime.StartFailed("sidecars need the bubblewrap runtime: this agent runs unsandboxed")
