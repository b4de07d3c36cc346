"""The simulated cloud: every host is a real ``nodus agent`` process on this machine.

Booting an offering waits its boot time (the offering's cold-boot median, scaled, or a fixed time
for tests) and then starts ``nodus agent --node-name N --offering ID --gpus G --join-token-file F``,
which exchanges the host's bootstrap token for its node credential, registers the Node and runs what
is bound to it. The agent gets the API server's address and CA from the controllers' kubeconfig, never
its credentials, and hides that kubeconfig's directory from its sandboxes (in ``nodus dev`` it holds
the administrator's token and the secret keys). The agent is started in its own session, so that the host
outlives a controller restart (a new leader adopts it by the pid recorded on the Node) and so that
killing the session kills the host and everything it runs, as losing a machine does.

Faults are injected the way a cloud inflicts them: ``kill`` (the host vanishes without notice: the
session gets SIGKILL), ``fail_boot`` (a host still booting never comes up) and preemption (the Node
is marked ``Terminating`` with reason ``Preempted``, a message saying whether interruptible capacity
was reclaimed or an on-demand host taken back, and a deadline; the agent stops its attempts before it,
and the host is killed at it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from nodus.agent import podengine
from nodus.apimachinery import units
from nodus.client import ClientConfig

Object = dict[str, Any]
log = logging.getLogger("nodus.cloud.sim")

PID_ANNOTATION = "sim.nodus.dev/pid"
# The pid of a host's agent, also kept beside its work directory: a controller that dies between booting a host
# and annotating its Node must not leave a host no one can adopt (and so no fault can reach).
PID_FILE = "pid"


def boot_seconds(
    offering: Object, boot_time: timedelta | None, boot_scale: float, overrides: Mapping[str, timedelta]
) -> float:
    """How long a simulated boot of ``offering`` takes: its override, else the fixed ``boot_time``, else the
    offering's cold-boot median times ``boot_scale`` (the simulated cloud and the fake cloud alike)."""
    override = overrides.get(offering["metadata"]["name"])
    if override is not None:
        return override.total_seconds()
    if boot_time is not None:
        return boot_time.total_seconds()
    p50 = ((offering.get("spec") or {}).get("boot") or {}).get("p50") or "0s"
    return units.parse_duration(p50).total_seconds() * boot_scale


@dataclass
class SimulatedCloudConfig:
    """How the simulated cloud behaves."""

    kubeconfig: Path
    work_dir: Path
    # None: each offering's boot p50 times boot_scale; else this fixed time for every boot.
    boot_time: timedelta | None = None
    boot_scale: float = 1.0
    capacity: int = 4
    capacity_overrides: dict[str, int] = field(default_factory=dict)
    boot_time_overrides: dict[str, timedelta] = field(default_factory=dict)
    runtime: str = "auto"
    heartbeat_interval: timedelta = timedelta(seconds=2)
    # Extra CA certificates agents trust for inputs and sources (a private HTTPS server in tests).
    agent_trust_ca: Path | None = None
    # Agents' destination flags (ADR 0032): loopback endpoints allowed (tests, nodus dev), and the
    # control plane's endpoints (its database) forbidden.
    agent_allow_loopback_endpoints: bool = False
    agent_forbid_addresses: tuple[str, ...] = ()
    # Registries agents pull from over plain HTTP (their --insecure-registry): the dev and test registries.
    agent_insecure_registries: tuple[str, ...] = ()
    checkpoint_time_scale: float = 1.0
    # Offerings whose hosts boot but never start their agent (a host that never registers).
    boot_hangs: frozenset[str] = frozenset()


@dataclass
class _Host:
    boot: asyncio.Task[None] | None = None
    pid: int | None = None
    boot_failed: bool = False


class SimulatedCloud:
    """A provider whose hosts are local agent processes (see the module docstring)."""

    name = "sim"

    def __init__(self, config: SimulatedCloudConfig) -> None:
        self.config = config
        self._hosts: dict[str, _Host] = {}
        self._cleanups: set[asyncio.Future[int]] = set()

    def capacity(self, offering: Object) -> int | None:
        return self.config.capacity_overrides.get(offering["metadata"]["name"], self.config.capacity)

    def is_up(self, node_name: str) -> bool:
        host = self._hosts.get(node_name)
        if host is None:
            return False
        if host.pid is not None:
            return _alive(host.pid)
        return host.boot is not None and not host.boot.done()

    def is_booting(self, node_name: str) -> bool:
        host = self._hosts.get(node_name)
        return host is not None and host.pid is None and host.boot is not None and not host.boot.done()

    def adopt(self, node: Object) -> bool:
        """Take over a host a previous controller started (its pid is on the Node, or in the host's ``pid`` file
        when that controller died before writing the annotation); True if alive."""
        name = node["metadata"]["name"]
        text = ((node["metadata"].get("annotations") or {}).get(PID_ANNOTATION)) or ""
        if not text.isdigit():
            with contextlib.suppress(OSError):
                text = (self.config.work_dir / name / PID_FILE).read_text().strip()
        if name in self._hosts or not text.isdigit() or not _alive(int(text)):
            return False
        self._hosts[name] = _Host(pid=int(text))
        return True

    def pid(self, node_name: str) -> int | None:
        host = self._hosts.get(node_name)
        return host.pid if host else None

    def annotations(self, node_name: str) -> dict[str, str]:
        """The pid of the host's agent, once it runs: what :meth:`adopt` reads back in a later controller."""
        pid = self.pid(node_name)
        return {} if pid is None else {PID_ANNOTATION: str(pid)}

    async def boot(self, node: Object, offering: Object, join_token: str) -> None:
        name = node["metadata"]["name"]
        if name in self._hosts:
            return
        host = _Host()
        self._hosts[name] = host
        host.boot = asyncio.create_task(self._boot(name, offering, host, join_token), name=f"boot {name}")

    def boot_delay(self, offering: Object) -> float:
        return boot_seconds(offering, self.config.boot_time, self.config.boot_scale, self.config.boot_time_overrides)

    async def _boot(self, name: str, offering: Object, host: _Host, join_token: str) -> None:
        await asyncio.sleep(self.boot_delay(offering))
        if offering["metadata"]["name"] in self.config.boot_hangs:
            log.warning("simulated cloud: node %s booted but its agent never starts (--sim-boot-hangs)", name)
            return
        spec = offering.get("spec") or {}
        work = self.config.work_dir / name
        work.mkdir(parents=True, exist_ok=True)
        server = ClientConfig.from_kubeconfig(self.config.kubeconfig)
        token_file = work / "join-token"
        _write_private(token_file, join_token.encode())
        command = [
            sys.executable,
            "-m",
            "nodus",
            "agent",
            "--server",
            server.server,
            *(["--certificate-authority", _copy_ca(server.ca_file, work)] if server.ca_file else []),
            "--join-token-file",
            str(token_file),
            "--hide",
            str(self.config.kubeconfig.parent),
            "--node-name",
            name,
            "--offering",
            offering["metadata"]["name"],
            "--gpus",
            str(int(spec.get("gpus") or 0)),
            "--runtime",
            self.config.runtime,
            "--work-dir",
            str(work),
            "--advertise-address",
            "127.0.0.1",  # every simulated host is this machine
            "--heartbeat-interval",
            units.format_duration(self.config.heartbeat_interval)
            if self.config.heartbeat_interval.total_seconds() >= 1
            else f"{int(self.config.heartbeat_interval.total_seconds() * 1000)}ms",
        ]
        if self.config.agent_trust_ca is not None:
            command += ["--trust-ca", str(self.config.agent_trust_ca)]
        if self.config.agent_allow_loopback_endpoints:
            command.append("--allow-loopback-endpoints")
        for address in self.config.agent_forbid_addresses:
            command += ["--forbid-address", address]
        for registry in self.config.agent_insecure_registries:
            command += ["--insecure-registry", registry]
        if self.config.checkpoint_time_scale != 1.0:
            command += ["--checkpoint-time-scale", repr(self.config.checkpoint_time_scale)]
        with (work / "agent.log").open("ab") as output:
            process = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True
            )
        host.pid = process.pid
        (work / PID_FILE).write_text(str(process.pid))
        # Reap the child when it exits so it does not linger as a zombie (and read as alive).
        asyncio.create_task(process.wait(), name=f"reap {name}")  # noqa: RUF006 - lives as long as the process
        log.info("booted node %s (offering %s) as pid %d", name, offering["metadata"]["name"], process.pid)

    def fail_boot(self, node_name: str) -> bool:
        """Make a host that is still booting never come up; False if it is not booting."""
        host = self._hosts.get(node_name)
        if host is None or host.pid is not None or host.boot is None or host.boot.done():
            return False
        host.boot.cancel()
        host.boot_failed = True
        return True

    def kill(self, node_name: str) -> bool:
        """The host vanishes: SIGKILL to its whole session. False if there is no running host."""
        host = self._hosts.get(node_name)
        if host is None or host.pid is None:
            return False
        _kill_session(host.pid, signal.SIGKILL)
        self._remove_pods(node_name)
        return True

    def _remove_pods(self, node_name: str) -> None:
        """The host is gone: so are its containers, which conmon keeps past its agent's death (in the background:
        podman takes a moment)."""
        work = self.config.work_dir / node_name
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            podengine.remove_pods_under(work)
            return
        task = loop.run_in_executor(None, podengine.remove_pods_under, work)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def terminate(self, node_name: str, grace_seconds: float) -> None:
        host = self._hosts.pop(node_name, None)
        if host is None:
            return
        if host.boot is not None and not host.boot.done():
            host.boot.cancel()
        if host.pid is None:
            return
        _kill_session(host.pid, signal.SIGTERM)
        deadline = asyncio.get_running_loop().time() + grace_seconds
        while _alive(host.pid) and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110 - polls another process
            await asyncio.sleep(0.05)
        _kill_session(host.pid, signal.SIGKILL)
        await asyncio.to_thread(podengine.remove_pods_under, self.config.work_dir / node_name)

    def forget(self) -> None:
        """Stop tracking every host without touching it (leadership lost: the next leader adopts them, and a
        later ``close()`` of this process must not take down hosts it no longer runs)."""
        for host in self._hosts.values():
            if host.boot is not None and host.pid is None:
                host.boot.cancel()  # not started yet: the next leader boots it (its Node is still Booting)
        self._hosts.clear()

    async def close(self) -> None:
        """Take every host down (``nodus dev`` stopping): agents get a short grace to report."""
        await asyncio.gather(*(self.terminate(name, 5.0) for name in list(self._hosts)))


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a file only its owner may read (replacing any file there, never through a link)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _copy_ca(ca_file: str, work: Path) -> str:
    """The CA beside the host's files: a kubeconfig's embedded CA lives in a directory the controller removes."""
    target = work / "ca.crt"
    target.write_bytes(Path(ca_file).read_bytes())
    return str(target)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) answers signal 0 too.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _kill_session(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
