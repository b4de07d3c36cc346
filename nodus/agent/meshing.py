"""One gang rank's assembly: register a mesh endpoint, wait for every peer, probe them, agree on a rendezvous.

A distributed Job runs each gang epoch as one Attempt per rank, each on its own host under its own
agent. The agents never talk to each other through the API server's Job; they assemble through the
rank Attempts' ``status.gang`` alone, in two barriers:

1. **Register.** Each rank starts a TCP mesh endpoint and writes its ``address`` (rank 0 also the
   program's ``rendezvous`` port), then waits until every member has an address.
2. **Probe.** Each rank measures the round trip to every peer and the bandwidth to the next rank of
   the ring, writes ``probe`` and ``probedTime``, then waits until every member has probed, so that
   probe traffic never overlaps the program that starts next.

Peers are watched with an :class:`~nodus.client.informers.Informer` over the epoch's
attempts (``nodus.dev/job=<job>,nodus.dev/gang-epoch=<epoch>``, filtered by ``spec.jobUID``). A
member that has ended, or says it could not mesh, fails the assembly at once rather than leaving
the others waiting; a peer that cannot be reached fails it too. Either way this rank writes
``status.gang.failure`` before raising :class:`MeshFailed`. There is no timeout here beyond the
10 s for each connection: the Job controller times the whole assembly out (``startupTimeout``) and
stops the attempts, which cancels :meth:`Mesh.assemble`.

The probe protocol, one connection per probe, any number of requests on it:
``E`` + 8 bytes, answered with the same 8 bytes (a round trip); ``B`` + an 8-byte big-endian length
+ that many bytes, answered with ``K`` once all have arrived (bandwidth).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import statistics
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.apis.v1.attemptgang import AttemptGangStatus
from nodus.client import Client, errors
from nodus.client.informers import Informer

Object = dict[str, Any]
log = logging.getLogger("nodus.agent")

ECHO, BULK, ACK = b"E", b"B", b"K"
CHUNK = 1 << 20
ECHOES = 5
CONNECT_TIMEOUT = 10.0
_LENGTH = struct.Struct(">Q")
Measure = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[float]]


@dataclass(frozen=True)
class Assembled:
    """The gang as every rank agrees on it once all have probed."""

    rendezvous_host: str
    rendezvous_port: int
    hosts: tuple[str, ...]  # each rank's mesh host, by rank
    rtt_ms: float  # this rank's slowest round trip to a peer
    bus_gbps: float  # this rank's measured bandwidth to rank (r+1) % size


class MeshFailed(Exception):
    """The gang cannot assemble: a peer could not be reached, has ended, or could not mesh (``str()`` says which)."""


class Mesh:
    """This rank's mesh endpoint and its part of the assembly.

    :meth:`assemble` runs once. When it returns or raises :class:`MeshFailed` the endpoint keeps
    serving (peers may still be probing this rank); when it is cancelled or fails otherwise the
    endpoint is closed. :meth:`close` closes it in every case and may be called more than once.
    """

    def __init__(
        self,
        client: Client,
        attempt: objects.Attempt,
        *,
        host: str = "127.0.0.1",
        probe_bytes: int = 32 << 20,
    ) -> None:
        spec, gang = attempt.spec, attempt.spec.gang
        self.client = client
        self.name = attempt.metadata.name
        self.namespace = str(attempt.metadata.namespace)
        self.rank = spec.rank or 0
        self.members: list[str] = list(gang.members) if gang else []
        self.job_uid = spec.job_uid
        self.selector = f"{labels.JOB}={spec.job},{labels.GANG_EPOCH}={gang.epoch if gang else spec.number}"
        self.host = host
        self.probe_bytes = probe_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._changed = asyncio.Event()

    async def assemble(self) -> Assembled:
        """Register, wait for every member, probe, report, wait for every member's probe; see the module."""
        informer = Informer(self.client, "attempts", namespace=self.namespace, label_selector=self.selector)
        informer.add_handler(lambda old, new: self._changed.set())
        watching = asyncio.create_task(informer.run(), name=f"mesh peers of {self.name}")
        try:
            address = await self._listen()
            registration: Object = {"address": address, "registeredTime": _now()}
            if self.rank == 0:
                registration["rendezvous"] = _join(self.host, _reserve_port(self.host))
            await self._patch(registration)
            peers = await self._wait(informer, lambda gang: gang.address)
            rtt_ms, bus_gbps = await self._probe([_gang(p).address or "" for p in peers])
            now = _now()
            probe = {"rttMs": f"{rtt_ms:.3f}", "busGbps": f"{bus_gbps:.2f}", "measuredTime": now}
            await self._patch({"probe": probe, "probedTime": now})
            peers = await self._wait(informer, lambda gang: gang.probed_time)
            try:
                rendezvous = _split(_gang(peers[0]).rendezvous or "")
            except ValueError as exc:
                raise MeshFailed(f"rank 0 ({self.members[0]}) registered no rendezvous: {exc}") from None
        except MeshFailed as exc:
            log.warning("attempt %s: %s", self.name, exc)
            try:
                await self._patch({"failure": str(exc)})
            except BaseException:
                await self.close()  # cancelled while reporting: as cancelled anywhere else
                raise
            raise
        except BaseException:
            await self.close()  # cancelled (the attempt is stopping) or broken: nobody meshes with this rank now
            raise
        finally:
            watching.cancel()
            await asyncio.wait([watching])  # unlike awaiting it, never swallows our own cancellation
        hosts = tuple(_split(str(_gang(p).address))[0] for p in peers)
        return Assembled(rendezvous[0], rendezvous[1], hosts, rtt_ms, bus_gbps)

    async def close(self) -> None:
        """Stop serving and drop every probe connection (called when the attempt ends)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._connections):
            writer.close()
        if server is not None:
            await server.wait_closed()

    # The endpoint

    async def _listen(self) -> str:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        port = int(self._server.sockets[0].getsockname()[1])
        return _join(self.host, port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while kind := await reader.read(1):
                if kind == ECHO:
                    writer.write(await reader.readexactly(8))
                elif kind == BULK:
                    (remaining,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
                    while remaining:
                        chunk = await reader.read(min(remaining, CHUNK))
                        if not chunk:
                            return
                        remaining -= len(chunk)
                    writer.write(ACK)
                else:
                    return  # not a peer speaking the protocol: hang up
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the prober went away mid-request; its own side reports that
        finally:
            self._connections.discard(writer)
            writer.close()

    # The barriers

    async def _wait(self, informer: Informer, reached: Callable[[AttemptGangStatus], object]) -> list[objects.Attempt]:
        """Every member's attempt, by rank, once ``reached`` is true of each one's ``status.gang``.

        Completion is checked first: a member that ended after the barrier was passed (its program
        may already have run) does not fail a rank whose informer saw both changes at once."""
        await informer.wait_synced()
        while True:
            self._changed.clear()
            views = (objects.read(objects.Attempt, a) for a in informer.items())
            by_name = {a.metadata.name: a for a in views if a.spec.job_uid == self.job_uid}
            found = [by_name.get(name) for name in self.members]
            if all(a is not None and reached(_gang(a)) for a in found):
                return [a for a in found if a is not None]
            for rank, attempt in enumerate(found):
                if attempt is None or rank == self.rank:
                    continue
                phase = attempt.status.phase
                if phase in phases.ATTEMPT_FINISHED:
                    raise MeshFailed(f"rank {rank} ({self.members[rank]}) has ended ({phase})")
                if _gang(attempt).failure:
                    raise MeshFailed(f"rank {rank} ({self.members[rank]}) could not mesh; see its status.gang.failure")
            await self._changed.wait()

    # Probing

    async def _probe(self, addresses: list[str]) -> tuple[float, float]:
        """(the slowest median round trip to a peer in ms, the bandwidth to the next rank in Gbit/s).

        Peers are probed one after the other so that one peer's probe does not slow another's."""
        rtt_ms = 0.0
        for rank, address in enumerate(addresses):
            if rank != self.rank:
                rtt_ms = max(rtt_ms, await self._with_peer(rank, address, self._round_trip))
        following = (self.rank + 1) % len(addresses)
        return rtt_ms, await self._with_peer(following, addresses[following], self._bandwidth)

    async def _with_peer(self, rank: int, address: str, measure: Measure) -> float:
        try:
            host, port = _split(address)
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT)
        except (OSError, ValueError, TimeoutError) as exc:
            raise MeshFailed(f"rank {rank} ({self.members[rank]}) at {address}: {_describe(exc)}") from exc
        try:
            return await measure(reader, writer)
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise MeshFailed(f"rank {rank} ({self.members[rank]}) at {address}: {_describe(exc)}") from exc
        finally:
            writer.close()

    async def _round_trip(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
        samples = []
        for _ in range(ECHOES):
            payload = os.urandom(8)
            started = time.perf_counter()
            writer.write(ECHO + payload)
            await writer.drain()
            if await reader.readexactly(8) != payload:
                raise ConnectionError("the echo came back altered")
            samples.append((time.perf_counter() - started) * 1000)
        return float(statistics.median(samples))

    async def _bandwidth(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
        block = memoryview(bytes(CHUNK))
        started = time.perf_counter()
        writer.write(BULK + _LENGTH.pack(self.probe_bytes))
        remaining = self.probe_bytes
        while remaining:
            size = min(remaining, CHUNK)
            writer.write(block[:size])
            await writer.drain()
            remaining -= size
        if await reader.readexactly(1) != ACK:
            raise ConnectionError("the bulk transfer was not acknowledged")
        seconds = max(time.perf_counter() - started, 1e-9)
        return self.probe_bytes * 8 / seconds / 1e9

    # Reporting

    async def _patch(self, gang: Object) -> None:
        """Merge ``gang`` into this attempt's ``status.gang``, retrying what the server may yet accept.

        A refusal (4xx but 429) is raised: retrying would not change it."""
        body = {"status": {"gang": gang}}
        delay = 0.2
        while True:
            try:
                await self.client.patch("attempts", self.name, body, self.namespace, subresource="status")
                return
            except errors.APIError as exc:
                if 400 <= exc.status < 500 and exc.status != 429:
                    raise
                log.warning("attempt %s: reporting the mesh failed (%s); retrying", self.name, exc)
            except Exception as exc:
                log.warning("attempt %s: reporting the mesh failed (%s); retrying", self.name, _describe(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def _reserve_port(host: str) -> int:
    """A free port for the program's rendezvous (torch's static rendezvous needs it known in advance).

    The socket is closed before the program binds the port, so another process could take it in
    between; an ephemeral port is rarely handed out again that soon, and the program would fail to
    bind rather than misbehave, so the epoch is retried as any failed start is."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


_NO_GANG = AttemptGangStatus()


def _gang(attempt: objects.Attempt) -> AttemptGangStatus:
    return attempt.status.gang or _NO_GANG


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split(address: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) apart; ValueError when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no connection within {CONNECT_TIMEOUT:g}s"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _now() -> str:
    return units.format_time(units.now())
