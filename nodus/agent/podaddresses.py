"""Giving back the ``Open`` network's addresses that containers no longer hold.

The ``Open`` bridge (``nodus.agent.podnet``) takes each container's address from CNI's ``host-local`` allocator,
which keeps one file per address under ``/var/lib/cni/networks/<network>/`` naming the container that holds it,
and deletes that file when podman tears the container's network down. A teardown that does not happen (a
container removed while its own cleanup still ran, an engine killed mid-way) leaves the file behind for good:
seen here, a dozen attempts leaked a dozen addresses, and once the /24 is full every container on the network
fails to start ("no IP addresses available in range set"). So before a container joins the network and the
range is more than half taken, the files of containers podman no longer knows are deleted.

Safety: the allocator's own lock (``lock`` in the same directory, an ``flock``) is held while files are read and
deleted, so no allocation happens meanwhile; podman's containers are listed first, and a file younger than
:data:`MIN_AGE` is kept whatever it names, since a container created after the listing may have just been given
it. Podman's store is the machine's (the agent runs podman without ``--root``), so the listing covers every
agent on the host, which matters where one machine plays several hosts (``nodus dev``, the tests).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("nodus.agent.podaddresses")

CNI_DATA = Path("/var/lib/cni/networks")
# A file this recent is kept even when podman's listing lacks its container (it may be newer than the listing).
MIN_AGE = 120.0


def crowded(network: str, size: int, data: Path = CNI_DATA) -> bool:
    """Whether more than half of ``size`` addresses of ``network`` are allocated (one directory read)."""
    try:
        with os.scandir(data / network) as entries:
            return sum(1 for entry in entries if _is_address(entry.name)) > size // 2
    except OSError:
        return False


def release_stale(network: str, podman: str = "podman", data: Path = CNI_DATA, now: float | None = None) -> int:
    """Delete the allocation files of ``network`` whose container podman does not know and that are older than
    :data:`MIN_AGE`; how many. Blocking (a podman listing); does nothing when podman cannot list."""
    directory = data / network
    if not directory.is_dir():
        return 0
    known = _containers(podman)
    if known is None:
        return 0
    moment = time.time() if now is None else now
    released = 0
    with _allocator_lock(directory):
        for path in directory.iterdir():
            if not _is_address(path.name):
                continue
            try:
                holder = path.read_text().split("\n", 1)[0].strip()
                age = moment - path.stat().st_mtime
            except OSError:
                continue
            if holder in known or age < MIN_AGE:
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                released += 1
    if released:
        log.warning("gave back %d addresses of network %s held by containers that are gone", released, network)
    return released


def _containers(podman: str) -> set[str] | None:
    try:
        listed = subprocess.run(
            [podman, "ps", "--all", "--no-trunc", "--format", "{{.ID}}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {line.strip() for line in listed.splitlines() if line.strip()}


@contextlib.contextmanager
def _allocator_lock(directory: Path) -> Iterator[None]:
    """The ``host-local`` allocator's lock on ``directory`` (its ``lock`` file, ``flock``), held for the block."""
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
