"""User archives (source blobs, Volume revisions, output inputs) unpacked in a sandbox of their own.

:func:`nodus.agent.archives.unpack` checks every member and writes nothing a member could redirect, but
it still parses a hostile stream (zstandard's C decoder, tar headers) inside the agent, which holds the
node's credentials and may run as root. Where the agent's runtime is bubblewrap, :class:`Unpacker` runs
that same code in a child confined like a program, so that a flaw in the parsing reaches nothing but
the destination (ADR 0031)::

    bwrap --unshare-pid --unshare-ipc --unshare-net --unshare-uts --die-with-parent --new-session
          [--cap-drop ALL]                      when the agent is root
          --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp
          --tmpfs <hidden>...                   the agent's work directory and credentials (RunSpec.hidden)
          [--ro-bind <interpreter paths>]       the agent's Python, when it lives under one of those
          --bind <destination> <destination>    the only writable host path
          -- <python> -I -m nodus.agent.archives <destination> <media type> <max bytes> <max entries>

The child reads the archive on its standard input (a descriptor of the downloaded blob: it never sees
where the agent keeps it), reports an :class:`~nodus.agent.archives.ArchiveError` on standard error with
exit status :data:`~nodus.agent.archives.REFUSED`, and is killed after :data:`TIMEOUT` seconds. It costs a
bwrap and a Python start per archive: about 90 ms on a busy two-core machine (ADR 0031). With the
unsandboxed runtime (which confines nothing else either) the same code runs in a worker thread of the agent.

A media type that is not an archive is one file, copied without parsing: always in the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodus.agent import archives
from nodus.agent.bubblewrap import BubblewrapRuntime
from nodus.agent.runtime import Runtime

TIMEOUT = 3600.0
"""Seconds one archive may take to unpack in the sandbox (a 1 TiB archive at about 300 MB/s)."""
_STDERR_LIMIT = 4096


@dataclass(frozen=True)
class Unpacker:
    """Unpacks blobs for the attempts of one agent: in a bubblewrap sandbox when ``bwrap`` is set, else here.

    ``hidden`` are host directories the sandbox covers (the agent's work directory, its credentials)."""

    bwrap: str | None = None
    hidden: tuple[str, ...] = ()
    limits: archives.Limits = field(default_factory=archives.Limits)
    timeout: float = TIMEOUT

    @classmethod
    def for_runtime(cls, runtime: Runtime, hidden: Sequence[str]) -> Unpacker:
        """The unpacker that matches the agent's runtime: confined for bubblewrap, in this process otherwise."""
        bwrap = runtime.bwrap if isinstance(runtime, BubblewrapRuntime) else None
        return cls(bwrap=bwrap, hidden=tuple(hidden))

    async def unpack(self, source: Path, destination: Path, media_type: str) -> None:
        """:func:`nodus.agent.archives.unpack` of the file ``source`` into ``destination``; ArchiveError."""
        if self.bwrap is None or not archives.is_archive(media_type):
            await asyncio.to_thread(archives.unpack, source, destination, media_type, self.limits)
            return
        await asyncio.to_thread(destination.mkdir, parents=True, exist_ok=True)
        with source.open("rb") as stdin:
            process = await asyncio.create_subprocess_exec(
                *self.command(destination, media_type),
                stdin=stdin,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env={},
                start_new_session=True,
            )
        try:
            async with asyncio.timeout(self.timeout):
                _, said = await process.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        message = said[-_STDERR_LIMIT:].decode("utf-8", "replace").strip()
        if process.returncode == archives.REFUSED:
            raise archives.ArchiveError(message)
        if process.returncode != 0:
            raise archives.ArchiveError(f"the unpacking sandbox failed (exit status {process.returncode}): {message}")

    def command(self, destination: Path, media_type: str) -> list[str]:
        """The bwrap command line for one archive (see the module docstring)."""
        assert self.bwrap is not None
        argv = [self.bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts"]
        argv += ["--die-with-parent", "--new-session"]
        if os.geteuid() == 0:
            argv += ["--cap-drop", "ALL"]
        argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        covered = ["/tmp", *(path for path in self.hidden if Path(path).is_dir())]
        for path in covered:
            argv += ["--tmpfs", path]
        for path in _interpreter_paths():
            if any(Path(path).is_relative_to(hidden) for hidden in covered):
                argv += ["--ro-bind", path, path]
        argv += ["--bind", str(destination), str(destination), "--chdir", "/", "--"]
        limits = [str(self.limits.max_bytes), str(self.limits.max_entries)]
        return [*argv, sys.executable, "-I", "-m", archives.__name__, str(destination), media_type, *limits]


def _interpreter_paths() -> list[str]:
    """What the child's Python needs to see: the environment, the base installation and this package."""
    package = Path(archives.__file__).resolve().parents[1]
    paths = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent), str(package)}
    return sorted(paths)


def clear(target: Path) -> None:
    """Remove the file or tree at ``target`` (an input's place, before it is put there again); a link there is
    removed itself, never followed (``shutil.rmtree`` walks by descriptor)."""
    try:
        status = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(status.st_mode):
        shutil.rmtree(target)
    else:
        target.unlink()
