"""Host uid ranges for attempts' user namespaces: one range per running attempt on this machine (ADR 0040).

Root in a container is host uid ``base`` of a range of 65,536 ids that no other running attempt holds, so
two tenants on one host cannot reach each other's files through the ids they write with, and neither is
the host's root. Ranges are slots above :data:`FIRST_UID`; a slot is held by an exclusive ``flock`` on a
file under a machine-wide directory for as long as its attempt runs. Locks, not memory, because several
agents may share one machine (the simulated cloud runs every host's agent on it), and a lock is released
by the kernel when its holder dies, so a crashed agent never leaks a range.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

RANGE_SIZE = 65536
# Above every id a distribution hands out (useradd stops at 60000, subuid ranges start at 100000) and the
# ids podman's own rootless users map.
FIRST_UID = 100_000_000
SLOTS = 10_000
DEFAULT_LOCK_DIR = Path("/run/nodus/userns")


class NoFreeRange(Exception):
    """Every slot is held: as many attempts as :data:`SLOTS` run on this machine."""


@dataclass
class UserRange:
    """A held range: ``base`` is the host uid (and gid) of the container's root."""

    base: int
    _fd: int

    def release(self) -> None:
        """Give the range back (idempotent)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    @property
    def uidmap(self) -> str:
        return f"0:{self.base}:{RANGE_SIZE}"


class UserNamespaces:
    """Hands out :class:`UserRange` slots; ``lock_dir`` is machine-wide (0700, root's)."""

    def __init__(self, lock_dir: Path = DEFAULT_LOCK_DIR) -> None:
        self.lock_dir = lock_dir
        self._next = os.getpid() % SLOTS  # agents on one machine start their search at different slots

    def acquire(self) -> UserRange:
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for offset in range(SLOTS):
            slot = (self._next + offset) % SLOTS
            fd = os.open(self.lock_dir / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._next = slot + 1
            return UserRange(FIRST_UID + slot * RANGE_SIZE, fd)
        raise NoFreeRange(f"all {SLOTS} user-namespace ranges under {self.lock_dir} are held by running attempts")
