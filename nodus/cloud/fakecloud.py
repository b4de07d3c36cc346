"""The fake cloud (``--provider fake``): hosts are entries in a directory that one ``nodus fakehosts`` process plays.

The simulated cloud starts a real ``nodus agent`` per host, which a 2-core machine cannot do for thousands of
hosts. This provider keeps the simulated cloud's contract (boot time, capacity, faults) but hands each booted host
to the fake-host process (``nodus.cloud.fakehosts``) through files, the only thing they share besides the API
(ADR 0059). Under ``directory``:

* ``boot/<node>.json``: written (atomically: a rename) once the boot time has passed: the node name, the offering
  and its spec, and the host's join token. The file is private (0600): it holds a credential. The fake-host process
  plays the host from then on, until it removes the file.
* ``kill/<node>``: the host stops at once, without notice (no more Lease renewals, no more writes).
* ``terminate/<node>``: the host goes away with ``grace`` seconds (the file's content) to report its attempts;
  a grace of 0 is a kill.

The fake-host process removes ``boot/<node>.json`` and the marker once it has acted on a marker, so a host that is
gone leaves no file. A host is up (:meth:`FakeCloud.is_up`) from its boot request until it is killed or terminated;
a later controller adopts it while its ``boot`` file is there and no marker is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from nodus.cloud.simulated import boot_seconds

Object = dict[str, Any]
log = logging.getLogger("nodus.cloud.fake")

BOOT, KILL, TERMINATE = "boot", "kill", "terminate"


@dataclass
class FakeCloudConfig:
    """How the fake cloud behaves: as :class:`~nodus.cloud.simulated.SimulatedCloudConfig` for boots and capacity."""

    directory: Path
    # None: each offering's boot p50 times boot_scale; else this fixed time for every boot.
    boot_time: timedelta | None = None
    boot_scale: float = 1.0
    capacity: int = 4
    capacity_overrides: dict[str, int] = field(default_factory=dict)
    boot_time_overrides: dict[str, timedelta] = field(default_factory=dict)


class FakeCloud:
    """A provider whose hosts a ``nodus fakehosts`` process plays (see the module docstring); it has
    :class:`~nodus.cloud.provider.FaultInjection`."""

    name = "fake"
    # It plays the simulated cloud's price book (its offerings name provider sim): StandsIn.
    offering_provider = "sim"

    def __init__(self, config: FakeCloudConfig) -> None:
        self.config = config
        for sub in (BOOT, KILL, TERMINATE):
            (config.directory / sub).mkdir(parents=True, exist_ok=True)
        # Node name -> its boot task while it boots (or after it failed); None once handed over, or adopted.
        self._hosts: dict[str, asyncio.Task[None] | None] = {}

    def capacity(self, offering: Object) -> int | None:
        return self.config.capacity_overrides.get(offering["metadata"]["name"], self.config.capacity)

    def is_up(self, node_name: str) -> bool:
        """Handed over (and not ended), or still booting; a boot that failed is not up."""
        if node_name not in self._hosts:
            return False
        task = self._hosts[node_name]
        return task is None or not task.done()

    def adopt(self, node: Object) -> bool:
        """Take over a host an earlier controller handed over: its boot file is there and nothing ended it."""
        name = node["metadata"]["name"]
        if name in self._hosts or not self._handed_over(name):
            return False
        self._hosts[name] = None
        return True

    def annotations(self, node_name: str) -> dict[str, str]:
        """Nothing: the boot file is what a later controller adopts by."""
        return {}

    async def boot(self, node: Object, offering: Object, join_token: str) -> None:
        name = node["metadata"]["name"]
        if name in self._hosts:
            return
        self._hosts[name] = asyncio.create_task(self._boot(name, offering, join_token), name=f"boot {name}")

    def boot_delay(self, offering: Object) -> float:
        return boot_seconds(offering, self.config.boot_time, self.config.boot_scale, self.config.boot_time_overrides)

    async def _boot(self, name: str, offering: Object, join_token: str) -> None:
        await asyncio.sleep(self.boot_delay(offering))
        # Markers of an earlier host of the same name would end this one as soon as it is played.
        for marker in (KILL, TERMINATE):
            (self.config.directory / marker / name).unlink(missing_ok=True)
        document = {
            "node": name,
            "offering": offering["metadata"]["name"],
            "spec": offering.get("spec") or {},
            "joinToken": join_token,
        }
        _write_private(self.config.directory / BOOT / f"{name}.json", orjson.dumps(document))
        self._hosts[name] = None
        log.info("booted fake host %s (offering %s)", name, offering["metadata"]["name"])

    def fail_boot(self, node_name: str) -> bool:
        """Make a host that is still booting never come up; False if it is not booting."""
        task = self._hosts.get(node_name)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def kill(self, node_name: str) -> bool:
        """The host vanishes: the fake-host process stops playing it at once. False if there is no running host."""
        if node_name not in self._hosts:
            return False
        if self._hosts[node_name] is not None:
            return False  # still booting, or its boot failed: nothing runs to kill (as in the simulated cloud)
        del self._hosts[node_name]
        _mark(self.config.directory / KILL / node_name, b"")
        return True

    async def terminate(self, node_name: str, grace_seconds: float) -> None:
        if node_name not in self._hosts:
            return
        task = self._hosts.pop(node_name)
        if task is not None and not task.done():
            task.cancel()
            return
        _mark(self.config.directory / TERMINATE / node_name, repr(float(grace_seconds)).encode())

    def forget(self) -> None:
        """Stop tracking every host without touching it (leadership lost: the next leader adopts them)."""
        for task in self._hosts.values():
            if task is not None and not task.done():
                task.cancel()  # not handed over yet: the next leader boots it (its Node is still Booting)
        self._hosts.clear()

    async def close(self) -> None:
        """Take every host down, as the simulated cloud does when ``nodus dev`` stops (a short grace to report)."""
        await asyncio.gather(*(self.terminate(name, 5.0) for name in list(self._hosts)))

    def _handed_over(self, name: str) -> bool:
        directory = self.config.directory
        ended = (directory / KILL / name).exists() or (directory / TERMINATE / name).exists()
        return (directory / BOOT / f"{name}.json").exists() and not ended


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only, appearing whole (a rename): the reader polls."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(partial, path)


def _mark(path: Path, data: bytes) -> None:
    with contextlib.suppress(FileNotFoundError):
        _write_private(path, data)
