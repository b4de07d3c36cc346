"""The host-side directory of one attempt, and how it appears inside the sandbox.

Every attempt gets ``<root>/<attempt name>/`` on the host::

    nodus/inputs/    -> /nodus/inputs   (read-only inside)
    nodus/outputs/   -> /nodus/outputs
    nodus/state/     -> /nodus/state
    nodus/secrets/   -> /nodus/secrets  (mode 0700 on the host)
    nodus/scratch/   -> /nodus/scratch
    nodus/connections/ -> /nodus/connections (read-only inside; mode 0700 on the host)
    nodus/checkpoint/ -> /nodus/checkpoint (the checkpoint protocol's request and ack files)
    nodus/gang/      -> /nodus/gang     (read-only inside: a gang launcher's files, such as a hostfile)
    nodus/progress   -> /nodus/progress (a file the program appends progress lines to)
    workdir/         -> the attempt's working directory (``spec.workingDir``, e.g. /workspace)

``root`` holds every attempt of the node, so the sandbox hides it as a whole: one attempt must not
read another's secrets through the read-only view of the host. The layout owns only the directory
tree; what goes into it (inputs, secrets) and when it is removed is the agent's decision.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from nodus.agent import hostfiles

# The directories under /nodus/ inside the sandbox, in the order of the contract.
NODUS_DIRECTORIES = ("inputs", "outputs", "state", "secrets", "scratch", "connections", "checkpoint", "gang")
# The directories the program may read but not change.
READ_ONLY_DIRECTORIES = frozenset({"inputs", "connections", "gang"})
# Readable by the agent's user only (the sandboxed program runs as that user).
PRIVATE_DIRECTORIES = frozenset({"secrets", "connections"})
# Mount point of the layout's nodus/ directory inside the sandbox.
SANDBOX_NODUS_DIR = "/nodus"
# The progress protocol's file (nodus.agent.progress), bound on its own: /nodus itself is read-only.
PROGRESS_FILE = f"{SANDBOX_NODUS_DIR}/progress"


@dataclass(frozen=True)
class AttemptLayout:
    """Host paths of one attempt. Build it with :meth:`create`; the constructor does not touch the disk."""

    root: Path
    """The directory that holds every attempt's directory on this node."""
    directory: Path
    """This attempt's directory, ``root / attempt name``."""

    @classmethod
    def create(cls, root: Path, attempt_name: str) -> AttemptLayout:
        """Create (or reuse, if it exists) the attempt's directory tree under ``root`` and return it.

        Idempotent, so an agent that restarts mid-attempt finds the same directories and their contents.
        What an earlier run left is reached without following links (``nodus.agent.hostfiles``): a link
        where a directory of the layout belongs raises UnsafePath, one at the progress file is replaced.
        Raises ValueError for a name that is not a single path component.
        """
        if not hostfiles.is_name(attempt_name):
            raise ValueError(f"{attempt_name!r} is not a valid attempt directory name")
        root = root.absolute()
        layout = cls(root=root, directory=root / attempt_name)
        for name in NODUS_DIRECTORIES:
            fd = hostfiles.open_directory(hostfiles.Location(layout.directory, ("nodus", name)), create=True)
            try:
                if name in PRIVATE_DIRECTORIES:
                    os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
        os.close(hostfiles.open_directory(hostfiles.Location(layout.directory, ("workdir",)), create=True))
        _regular_file(hostfiles.Location(layout.directory, ("nodus", "progress")))
        return layout

    @property
    def nodus_dir(self) -> Path:
        """Host path of what the program sees as ``/nodus``."""
        return self.directory / "nodus"

    @property
    def inputs(self) -> Path:
        return self.nodus_dir / "inputs"

    @property
    def outputs(self) -> Path:
        return self.nodus_dir / "outputs"

    @property
    def state(self) -> Path:
        return self.nodus_dir / "state"

    @property
    def secrets(self) -> Path:
        return self.nodus_dir / "secrets"

    @property
    def connections(self) -> Path:
        return self.nodus_dir / "connections"

    @property
    def scratch(self) -> Path:
        return self.nodus_dir / "scratch"

    @property
    def progress(self) -> Path:
        """Host path of ``/nodus/progress``."""
        return self.nodus_dir / "progress"

    @property
    def checkpoint(self) -> Path:
        """Host path of ``/nodus/checkpoint``: the request, ack and signal files (``nodus.agent.checkpointing``)."""
        return self.nodus_dir / "checkpoint"

    @property
    def gang(self) -> Path:
        """Host path of ``/nodus/gang``: what a gang launcher writes for the program (``nodus.agent.launchers``)."""
        return self.nodus_dir / "gang"

    @property
    def mirror(self) -> Path:
        """The staging copy of the checkpoint paths, kept between checkpoints; never visible to the program."""
        return self.directory / "checkpoint-mirror"

    @property
    def workdir(self) -> Path:
        """Host path of the program's working directory (mounted at ``RunSpec.working_dir``)."""
        return self.directory / "workdir"

    def remove(self) -> None:
        """Delete the attempt's directory and everything in it; a no-op if it is already gone.

        Call it only once the attempt's process has ended: a running program would keep writing.
        Other errors (a directory the program made unwritable, for an agent not running as root) are raised:
        the agent decides whether leftover disk is worth a retry.
        """
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.directory)


def _regular_file(location: hostfiles.Location) -> None:
    """Keep the regular file at ``location``, or make an empty one where there is none or a link was left."""
    try:
        os.close(hostfiles.open_file(location))
        return
    except FileNotFoundError:
        pass
    except hostfiles.UnsafePath:
        hostfiles.remove(location)
    hostfiles.write_file(location, b"")
