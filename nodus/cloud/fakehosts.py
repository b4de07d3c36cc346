"""``nodus fakehosts``: one process plays every host of the fake cloud (``nodus.cloud.fakecloud``, ADR 0059).

The process polls the fake cloud's directory for hosts handed over (``boot/<node>.json``) and for faults
(``kill/<node>``, ``terminate/<node>``), and plays each host as a :class:`~nodus.cloud.fakehost.FakeHost`: its own
node credential, its Node, its Lease, its Attempts. What costs a real agent a process, a watch and a connection
each is shared here, so a 2-core machine plays thousands of hosts:

* every host's writes go through ONE :class:`~nodus.client.Client` (one connection pool), each request carrying that
  host's bearer token, so the node authorizer decides each host's writes as that host's;
* ONE watch of Attempts (every project) and ONE of Nodes feed every host. A node credential may list only its own
  Attempts, so these watches use the ``observer`` credential (an administrator's, or the controllers' read rights):
  the one thing a fake host learns otherwise than a real one does. Nothing is written with it;
* ONE heartbeat loop renews the Leases that are due, a bounded number at a time;
* joins (credential exchange, Node ``Ready``) run a bounded number at a time and are retried.

The process never imports the controllers (import-linter: the fake hosts are a cloud, below them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from nodus.client import Client, ClientConfig
from nodus.client.informers import Informer
from nodus.cloud.fakecloud import BOOT, KILL, TERMINATE
from nodus.cloud.fakehost import FakeHost

Object = dict[str, Any]
log = logging.getLogger("nodus.cloud.fakehosts")

NODE_INDEX = "node"
JOIN_RETRY_SECONDS = 2.0


@dataclass
class FakeHostsSettings:
    directory: Path
    # The API server and its CA; its token, if any, is never sent (each host sends its own).
    server: ClientConfig
    # The credential of the shared watches of Attempts and Nodes (reads only).
    observer: ClientConfig
    heartbeat_interval: timedelta = timedelta(seconds=10)
    # How long a fake program runs when its Job does not say (FAKEHOST_DURATION).
    default_duration: timedelta = timedelta(seconds=5)
    # Node credentials this short-lived (renewed halfway); None: the server's lifetime.
    credential_lifetime: timedelta | None = None
    scan_interval: float = 0.2
    # Requests in flight at once for joins and for heartbeats (each), and the shared pool's connections.
    concurrency: int = 16
    max_connections: int = 24


class FakeHosts:
    """The fake-host process (see the module docstring); :meth:`run` until cancelled."""

    def __init__(self, settings: FakeHostsSettings) -> None:
        self.settings = settings
        bare = ClientConfig(server=settings.server.server, ca_file=settings.server.ca_file)
        self.client = Client(bare, user_agent="nodus-fakehosts", max_connections=settings.max_connections)
        self.observer = Client(settings.observer, user_agent="nodus-fakehosts-watch", max_connections=4)
        self.hosts: dict[str, FakeHost] = {}
        self.attempts = Informer(self.observer, "attempts")
        self.attempts.add_index(NODE_INDEX, _node_of)
        self.nodes = Informer(self.observer, "nodes")
        self.attempts.add_handler(self._attempt_changed)
        self.nodes.add_handler(self._node_changed)
        self._dirty: set[str] = set()
        self._kick = asyncio.Event()
        self._next_beat: dict[str, float] = {}
        self._beating: set[str] = set()
        self._joins = asyncio.Semaphore(settings.concurrency)
        self._beats = asyncio.Semaphore(settings.concurrency)
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.attempts.run())
                group.create_task(self.nodes.run())
                await self.attempts.wait_synced()
                await self.nodes.wait_synced()
                group.create_task(self._scan_forever())
                group.create_task(self._beat_forever())
                group.create_task(self._converge_forever())
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop playing every host at once (as if each were killed) and close the connections."""
        for host in self.hosts.values():
            host.kill()
        for task in list(self._tasks):
            task.cancel()
        await self.client.aclose()
        await self.observer.aclose()

    # The directory

    async def _scan_forever(self) -> None:
        while True:
            try:
                self.scan()
            except OSError:
                log.exception("scanning %s failed", self.settings.directory)
            await asyncio.sleep(self.settings.scan_interval)

    def scan(self) -> None:
        """Take on the hosts handed over and act on the faults marked since the last scan."""
        directory = self.settings.directory
        booted = {entry[: -len(".json")] for entry in _names(directory / BOOT) if entry.endswith(".json")}
        for name in booted - self.hosts.keys():
            self._take_on(name)
        for name in _names(directory / KILL):
            host = self.hosts.get(name)
            if host is not None:
                log.info("fake host %s killed", name)
                host.kill()
            self._end(name, KILL)
        for name in _names(directory / TERMINATE):
            host = self.hosts.get(name)
            if host is not None:
                grace = _grace(directory / TERMINATE / name)
                if grace <= 0:
                    host.kill()  # no time to report: as the simulated cloud's SIGKILL right after SIGTERM
                else:
                    host.leave("the provider terminates the host", grace)
            self._end(name, TERMINATE)
        # A host that is gone and whose boot file is too is forgotten; one gone with its file there stays known,
        # so that it is not played again.
        for name, host in list(self.hosts.items()):
            if host.state == "gone" and name not in booted and not any(run.going for run in host.runs.values()):
                del self.hosts[name]
                self._next_beat.pop(name, None)

    def _take_on(self, name: str) -> None:
        path = self.settings.directory / BOOT / f"{name}.json"
        try:
            document = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return  # removed meanwhile; a partial file is never seen (the provider renames it in place)
        host = FakeHost(
            self.client,
            name,
            str(document["offering"]),
            dict(document.get("spec") or {}),
            str(document["joinToken"]),
            self.settings.default_duration,
            self.settings.credential_lifetime,
        )
        self.hosts[name] = host
        self._spawn(self._join(host))

    def _end(self, name: str, marker: str) -> None:
        directory = self.settings.directory
        (directory / BOOT / f"{name}.json").unlink(missing_ok=True)
        (directory / marker / name).unlink(missing_ok=True)

    async def _join(self, host: FakeHost) -> None:
        while host.state == "joining":
            async with self._joins:
                try:
                    await host.join()
                except Exception as exc:
                    log.warning("fake host %s: joining failed (%s); retrying", host.name, exc)
            if host.state == "joining":
                await asyncio.sleep(JOIN_RETRY_SECONDS)
        if host.state == "ready":
            log.info("fake host %s ready", host.name)
            self._next_beat[host.name] = time.monotonic() + self.settings.heartbeat_interval.total_seconds()
            self._mark(host.name)

    # Heartbeats

    async def _beat_forever(self) -> None:
        interval = self.settings.heartbeat_interval.total_seconds()
        while True:
            now = time.monotonic()
            for name, due in list(self._next_beat.items()):
                host = self.hosts.get(name)
                if host is None or host.state == "gone":
                    self._next_beat.pop(name, None)
                    continue
                if due > now or name in self._beating:
                    continue
                # The next beat is an interval after this one was due, not after it was sent: a slow round does
                # not push every Lease towards expiry.
                self._next_beat[name] = max(due + interval, now)
                self._beating.add(name)
                self._spawn(self._beat(host))
            await asyncio.sleep(min(interval / 4, 0.25))

    async def _beat(self, host: FakeHost) -> None:
        try:
            async with self._beats:
                await host.beat()
        except Exception as exc:
            log.warning("fake host %s: heartbeat failed: %s", host.name, exc)
        finally:
            self._beating.discard(host.name)

    # Converging

    def _attempt_changed(self, old: Object | None, new: Object | None) -> None:
        for obj in (old, new):
            if obj is not None:
                node = _node_of(obj)
                if node:
                    self._mark(node[0])

    def _node_changed(self, old: Object | None, new: Object | None) -> None:
        obj = new or old
        if obj is None:
            return
        name = obj["metadata"]["name"]
        host = self.hosts.get(name)
        if new is None and host is not None:
            host.leave("the Node was deleted", 0)
        self._mark(name)

    def _mark(self, name: str) -> None:
        if name in self.hosts:
            self._dirty.add(name)
            self._kick.set()

    async def _converge_forever(self) -> None:
        """Converge the hosts something changed for at once, and every host every second (runs end on their own
        clock, and a leaving host is gone once they have reported)."""
        everyone = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), 1.0)
            self._kick.clear()
            names, self._dirty = self._dirty, set()
            # A steady stream of changes must not starve the hosts nothing changed for.
            if time.monotonic() - everyone >= 1.0:
                names, everyone = set(self.hosts), time.monotonic()
            for name in names:
                host = self.hosts.get(name)
                if host is not None:
                    host.converge(self.nodes.get(None, name), self.attempts.by_index(NODE_INDEX, name))

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks.add(task)  # kept until done: the loop holds tasks weakly
        task.add_done_callback(self._tasks.discard)


def _node_of(attempt: Object) -> list[str]:
    node = (attempt.get("spec") or {}).get("node")
    return [str(node)] if node else []


def _names(directory: Path) -> list[str]:
    """The entries of ``directory`` but partial files (dot files); none when it does not exist."""
    with contextlib.suppress(FileNotFoundError):
        return [name for name in (entry.name for entry in os.scandir(directory)) if name[:1] != "."]
    return []


def _grace(marker: Path) -> float:
    with contextlib.suppress(OSError, ValueError):
        return float(marker.read_text() or "0")
    return 0.0
