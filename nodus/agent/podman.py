"""The container runtime: each attempt in its OCI image, through podman with runc (ADR 0040).

One attempt is one pod (``nodus-<attempt dir>``) when it has sidecars or an AllowList proxy: the program and each
sidecar are containers in it, sharing its network, IPC and UTS namespaces and the attempt's ``/nodus`` volumes,
each with a PID and cgroup namespace of its own, as in a Kubernetes pod. Without them the program's container
stands alone (``nodus.agent.pods``). What every container of the attempt gets:

* its image's filesystem (writable in the container's own layer), ``/nodus`` bound from the attempt's
  layout (inputs, connections and gang read-only) and the working directory bound from ``layout.workdir``
  (unless the image's own WORKDIR is used: ``RunSpec.bind_working_dir``);
* a user namespace of its own (``--uidmap``): root in the image is host uid ``<base>`` of a 65,536-id
  range no other running attempt on this machine holds (:class:`UserNamespaces`), so a file it writes on a
  host bind is not root's; the attempt's writable directories are chowned into the range (``:U``);
* the engine's default seccomp profile and capability set, ``no-new-privileges``, a private cgroup
  namespace, catatonit as init (``--init``: signals reach the program, zombies are reaped);
* limits: ``--cpus``, ``--memory`` (swap included: no swap beyond it), ``--pids-limit``; ephemeral disk is
  watched by the agent (``nodus.agent.disk``), since overlay on ext4 has no quota;
* devices by their CDI names (``--device nvidia.com/gpu=0``), exactly the attempt's;
* the network: ``none`` (Deny, and AllowList with the agent's proxy reached at ``127.0.0.1:3128`` in the
  pod's network namespace through a forwarder, ``nodus.agent.podnet``) or the ``nodus`` bridge (Open,
  with the host's rules against link-local, host and control-plane addresses);
* its environment exactly ``RunSpec.env`` (podman's own proxy variables are not copied in:
  ``--http-proxy=false``), from a 0600 file, never the command line; the argv as the entrypoint
  (``--entrypoint`` as JSON: the caller has applied Kubernetes' command/args rules to the image's).

Exits come from the engine (``podman inspect``), OOM kills from the kernel's count in the container's
memory cgroup (``nodus.agent.cgroups``), never from a guess. podman, like Docker, reports a death by
signal n as exit code 128 + n: a code above 128 that names a signal is reported as that signal, as the
kubelet does (a program exiting 137 by itself reads as SIGKILL). ``stop()`` signals every process in the
program's cgroup but its init, ``kill()`` its init (the PID namespace goes with it), ``freeze()`` uses
the cgroup freezer (what ``podman pause`` does). Sidecars follow the bubblewrap runtime's rules (ready file
``/nodus/run/ready/<name>`` or two seconds running; stopped after the program, 5 s grace).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from pathlib import Path

from nodus.agent import cgroups, disk, runtime
from nodus.agent.podengine import HOW_TO_FIX, Engine
from nodus.agent.pods import Attached, Pod
from nodus.agent.usernamespaces import UserNamespaces

log = logging.getLogger(__name__)


class PodmanRuntime:
    name = "podman"

    def __init__(
        self,
        engine: Engine,
        *,
        open_network: str = "podman",
        userns: UserNamespaces | None = None,
        disk_interval: float = 10.0,
    ) -> None:
        self.engine = engine
        self.open_network = open_network
        self.userns = userns or UserNamespaces()
        # How often an attempt's ephemeral disk is measured (the kubelet's housekeeping is 10 s too).
        self.disk_interval = disk_interval

    @classmethod
    def probed(cls, work_dir: Path, *, open_network: str = "podman") -> PodmanRuntime:
        """The runtime, once podman has answered here with the agent's configuration (RuntimeUnavailable
        with podman's own words when it cannot). Blocking: call it at agent start."""
        engine = Engine.configured(work_dir)
        try:
            result = subprocess.run(
                [engine.podman, "info", "--format", "{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}}"],
                env=engine.environment(),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise runtime.RuntimeUnavailable(f"podman could not run ({error}); {HOW_TO_FIX}") from error
        if result.returncode != 0:
            said = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
            raise runtime.RuntimeUnavailable(f"podman does not work on this host: {said[0]}; {HOW_TO_FIX}")
        return cls(engine, open_network=open_network)

    async def start(self, spec: runtime.RunSpec) -> runtime.Process:
        runtime.check_spec(spec)
        if spec.image is None:
            raise runtime.StartFailed("the container runtime needs the attempt's image")
        pod = Pod(self.engine, spec, open_network=self.open_network, userns=self.userns)
        watches: list[cgroups.OomWatch] = []
        evictions: list[PodmanProcess] = []
        disk_watch = None
        if spec.limits.disk_bytes is not None:
            limit = spec.limits.disk_bytes

            def exceeded(used: int) -> None:
                for process in evictions:
                    process.evict("EphemeralStorageExceeded", f"{used} bytes written, over resources.disk ({limit})")

            paths = disk.writable_paths(spec.layout, pod.run_dir)
            disk_watch = disk.DiskWatch(paths, limit, exceeded, interval=self.disk_interval)

        def watch(pid: int) -> None:
            # Before the program runs: an OOM kill in its first milliseconds is counted too.
            watches.append(cgroups.OomWatch(cgroups.ContainerCgroup(pid)))
            watches[0].start()

        try:
            await pod.create()
            for sidecar in spec.sidecars:
                await pod.start_sidecar(sidecar)
            main = await pod.start_container("main", spec.image, spec.argv, spec.env, sidecar=None, before_start=watch)
            if disk_watch is not None:
                for container in pod.containers:
                    disk_watch.add_path(await disk.upper_dir(self.engine, container.name))
        except BaseException:
            for started in watches:
                started.close()
            if disk_watch is not None:
                disk_watch.close()
            await asyncio.shield(pod.remove())
            raise
        process = PodmanProcess(pod, main, watches[0], disk_watch)
        if disk_watch is not None:
            evictions.append(process)
            disk_watch.start()
        return process


class PodmanProcess(runtime.HostProcess):
    """The program's container; ending it ends the pod (sidecars stopped, everything removed)."""

    def __init__(self, pod: Pod, main: Attached, oom: cgroups.OomWatch, disk_watch: disk.DiskWatch | None) -> None:
        self._pod = pod
        self._main = main
        self._oom = oom
        self._cgroup = oom.cgroup
        self._disk = disk_watch
        self._evicted: tuple[str, str] | None = None
        self._kills: set[asyncio.Task[tuple[int, str, str]]] = set()
        super().__init__(main.pid, pod.streams())
        self._watch()

    def _signal(self, number: int) -> None:
        if number == signal.SIGKILL:
            # catatonit is the PID namespace's init: when it dies the kernel kills every process in it. The engine
            # is told too, so that a kill is never lost to a pid that changed meanwhile.
            _kill_quietly(self._main.pid, number)
            task = asyncio.get_running_loop().create_task(
                self._pod.engine.run("kill", "--signal", "KILL", self._main.name, timeout=30)
            )
            self._kills.add(task)
            task.add_done_callback(self._kills.discard)
            return
        for pid in self._cgroup.pids() - {self._main.pid}:
            _kill_quietly(pid, number)

    def evict(self, reason: str, message: str) -> None:
        """End the program for a limit the runtime enforces itself (the kubelet's eviction): SIGKILL, and the Exit
        says why."""
        if self._evicted is None and not self._ended_task().done():
            self._evicted = (reason, message)
            self._agent_killed = True
            self._signal(signal.SIGKILL)

    def freeze(self) -> None:
        if not self._ended_task().done() and not self._cgroup.freeze():
            super().freeze()

    def thaw(self) -> None:
        if not self._ended_task().done() and not self._cgroup.thaw():
            super().thaw()

    async def _terminate_then_kill(self, grace_seconds: float) -> None:
        self._cgroup.thaw()
        await super()._terminate_then_kill(grace_seconds)

    async def _until_ended(self) -> runtime.Exit:
        try:
            returncode = await self._main.wait()
        finally:
            self._oom.close()
            if self._disk is not None:
                self._disk.close()
            await asyncio.shield(self._pod.remove(grace=0 if self._agent_killed else None))
        if returncode > 128 and returncode - 128 in _SIGNALS:
            returncode = -(returncode - 128)
        elif self._agent_killed:
            # Killed in the instant podman was still starting it, the engine records whatever its start saw.
            returncode = -signal.SIGKILL
        exit = runtime.Exit.from_returncode(returncode, stop_requested=self._stop_requested, agent_killed=True)
        evicted, message = self._evicted or (None, "")
        return runtime.Exit(
            exit.code,
            exit.signal,
            oom_killed=self._oom.killed,
            stopped=exit.stopped,
            evicted=evicted,
            evicted_message=message,
        )


_SIGNALS = frozenset(int(number) for number in signal.Signals)


def _kill_quietly(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, number)
