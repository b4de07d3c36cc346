"""One attempt's pod: created, its containers started attached, and removed with everything it held.

See ``nodus.agent.podman`` for what each container gets and why (ADR 0040). A :class:`Pod` owns, from
:meth:`Pod.create` until :meth:`Pod.remove`: the podman pod and its containers, the user range, the egress
proxy and its forwarder (AllowList), and the ``podman start --attach`` processes whose pipes carry each
container's output. ``remove()`` is idempotent and safe after a failed or cancelled start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodus.agent import egress, runtime
from nodus.agent.layout import NODUS_DIRECTORIES, PROGRESS_FILE, READ_ONLY_DIRECTORIES, SANDBOX_NODUS_DIR
from nodus.agent.podengine import HOST_LABEL, Engine
from nodus.agent.usernamespaces import UserNamespaces, UserRange

log = logging.getLogger(__name__)

SANDBOX_RUN_DIR = f"{SANDBOX_NODUS_DIR}/run"
SANDBOX_READY_DIR = f"{SANDBOX_RUN_DIR}/ready"
# A sidecar that has run this long without creating its ready file counts as ready (as in bubblewrap).
SIDECAR_READY_AFTER = 2.0
SIDECAR_STOP_GRACE = 5
_READY_POLL = 0.05
# How often a waiting attach client is checked against the engine's state of its container.
_ATTACH_CHECK = 2.0
# Environment names podman itself reads: a Job's multi-line value cannot pass under them (see _environment).
_ENGINE_NAMES = frozenset({"PATH", "HOME", "TMPDIR", "CONTAINERS_CONF", "NOTIFY_SOCKET"})
_ENGINE_PREFIXES = ("CONTAINERS_", "STORAGE_", "REGISTRY_", "XDG_", "BUILDAH_", "PODMAN_", "_CONTAINERS_")
# Characters podman's --volume syntax cannot carry in a path.
_VOLUME_UNSAFE = (":", ",")


@dataclass
class Attached:
    """A started container and the ``podman start --attach`` process carrying its output."""

    name: str
    pid: int
    """Host pid of the container's init (catatonit)."""
    process: asyncio.subprocess.Process
    streams: dict[str, asyncio.StreamReader]
    engine: Engine

    async def wait(self) -> int:
        """The container's exit status, once it has ended (as the engine records it)."""
        while self.process.returncode is None:
            try:
                await asyncio.wait_for(asyncio.shield(self.process.wait()), _ATTACH_CHECK)
            except TimeoutError:
                # The attach client may outlive a container killed while podman was still starting it: once the
                # engine says the container is gone, the client has nothing more to carry.
                _, status, _, _ = await self.engine.state(self.name)
                if status in ("exited", "stopped", "gone"):
                    with contextlib.suppress(ProcessLookupError):
                        self.process.kill()
        # The attach stream closes as the container ends, which may be before the engine has recorded its exit:
        # `podman wait` returns the recorded status.
        try:
            code, out, _ = await self.engine.run("wait", self.name, timeout=30)
        except TimeoutError:
            code, out = 1, ""
        if code != 0 or not out.strip().lstrip("-").isdigit():
            return self.process.returncode or 0
        return int(out.strip())


@dataclass
class Pod:
    engine: Engine
    spec: runtime.RunSpec
    open_network: str
    userns: UserNamespaces
    name: str = ""
    containers: list[Attached] = field(default_factory=list)
    _range: UserRange | None = None
    _proxy: egress.EgressProxy | None = None
    _forwarder: Any = None
    _removed: bool = False

    def __post_init__(self) -> None:
        self.name = f"nodus-{self.spec.layout.directory.name}"
        self._network = "none"
        self._labels: list[str] = []

    @property
    def standalone(self) -> bool:
        """Without sidecars or the AllowList forwarder nothing shares the program's namespaces: no pod (its infra
        container costs a runc start and a removal), the program's container stands alone (ADR 0040)."""
        return not self.spec.sidecars and self.spec.egress.policy != "AllowList"

    @property
    def run_dir(self) -> Path:
        return self.spec.layout.directory / "run"

    async def create(self) -> None:
        _check_paths(self.spec)
        self._range = self.userns.acquire()
        (self.run_dir / "ready").mkdir(parents=True, exist_ok=True)
        network = {"Open": self.open_network}.get(self.spec.egress.policy, "none")
        if self.spec.host_network:
            if self.spec.egress.policy != "Open":
                raise runtime.StartFailed(
                    f"a gang rank shares the host's network for its collective traffic, where egress "
                    f"{self.spec.egress.policy} cannot be enforced: use egress Open for distributed Jobs"
                )
            network = "host"
        self._network = network
        if network == self.open_network:
            await _give_back_stale_addresses(network, self.engine.podman)
        self._labels = [
            "--label", f"nodus.attempt={self.spec.layout.directory}",
            "--label", f"{HOST_LABEL}={self.spec.layout.root.parent}",
        ]  # fmt: skip
        if self.standalone:
            return  # the program's container alone: it takes the network, user range and labels itself
        create = (
            "pod", "create", "--name", self.name, "--infra-name", f"{self.name}-infra",
            "--share", "net,ipc,uts", "--network", network,
            "--uidmap", self._range.uidmap, "--gidmap", self._range.uidmap, *self._labels,
        )  # fmt: skip
        code, _, err = await self.engine.run(*create)
        if code != 0 and "already exists" in err:
            # A pod left by an agent that died mid-attempt holds the name: it is this attempt's, so it goes.
            await self.engine.run("pod", "rm", "--force", "--time", "0", self.name)
            code, _, err = await self.engine.run(*create)
        if code != 0:
            raise runtime.StartFailed(f"the pod could not be created: {_last_line(err)}")
        if self.spec.egress.policy == "AllowList":
            await self._start_egress()

    async def _start_egress(self) -> None:
        from nodus.agent import podnet

        try:
            self._proxy = await egress.EgressProxy.start(
                self.spec.layout.directory / "egress.sock",
                self.spec.egress.allow,
                self.spec.egress.presets,
                policy=self.spec.egress.destinations,
            )
        except (OSError, ValueError) as error:
            raise runtime.StartFailed(f"the egress proxy could not be started: {error}") from error
        code, _, err = await self.engine.run("pod", "start", self.name)
        infra_pid, _, _, _ = await self.engine.state(f"{self.name}-infra")
        if code != 0 or not infra_pid:
            raise runtime.StartFailed(f"the pod's network could not be started: {_last_line(err)}")
        self._forwarder = await podnet.start_forwarder(infra_pid, self._proxy.socket_path, egress.PROXY_PORT)

    def streams(self) -> dict[str, asyncio.StreamReader]:
        return {name: stream for container in self.containers for name, stream in container.streams.items()}

    async def start_sidecar(self, sidecar: runtime.Sidecar) -> None:
        """Start ``sidecar`` and wait until it is ready (StartFailed when it ends or times out first)."""
        image = sidecar.image or self.spec.image
        assert image is not None
        ready_file = self.run_dir / "ready" / sidecar.name
        env = {**sidecar.env, "NODUS_READY_FILE": f"{SANDBOX_READY_DIR}/{sidecar.name}"}
        attached = await self.start_container(sidecar.name, image, sidecar.argv, env, sidecar=sidecar.name)
        started = time.monotonic()
        while True:
            if attached.process.returncode is not None:
                code = await attached.wait()
                said = await _last_output(attached.streams[f"sidecar/{sidecar.name}/stderr"])
                raise runtime.StartFailed(
                    f"sidecar {sidecar.name} failed to start: it exited with code {code} before it was ready"
                    + (f" (it said: {said})" if said else "")
                )
            waited = time.monotonic() - started
            if ready_file.exists() or waited >= SIDECAR_READY_AFTER:
                return
            if waited >= sidecar.startup_timeout:
                raise runtime.StartFailed(
                    f"sidecar {sidecar.name} failed to start: not ready within {sidecar.startup_timeout:g} s"
                )
            await asyncio.sleep(_READY_POLL)

    async def start_container(
        self,
        role: str,
        image: runtime.ContainerImage,
        argv: list[str],
        env: dict[str, str],
        *,
        sidecar: str | None,
        before_start: Callable[[int], None] | None = None,
    ) -> Attached:
        """Create and start one container of the pod, attached; returns once it runs (or has already ended).

        ``before_start`` is called with the host pid of the container's init once its cgroups exist and before
        its program runs (``podman init``, then ``podman start``): a watch on them misses nothing."""
        container = f"{self.name}-{role}"
        what = f"sidecar {sidecar}" if sidecar else "the program's container"
        env = {**env, **(egress.PROXY_ENV if self.spec.egress.policy == "AllowList" else {})}
        env_file, passed = _environment(self.spec.layout.directory / f".{role}.env", env)
        flags = self._container_flags(container, image, argv, env_file, passed, main=sidecar is None)
        try:
            code, _, err = await self.engine.run("create", *flags, env={name: env[name] for name in passed})
            if code != 0 and self.standalone and "already in use" in err:
                # A container left by an agent that died mid-attempt holds the name: it is this attempt's.
                await self.engine.run("rm", "--force", "--time", "0", container)
                code, _, err = await self.engine.run("create", *flags, env={name: env[name] for name in passed})
        finally:
            env_file.unlink(missing_ok=True)
        if code != 0:
            raise runtime.StartFailed(f"{what} could not be created: {_last_line(err)}")
        code, _, err = await self.engine.run("init", container)
        pid, _, _, error = await self.engine.state(container)
        if code != 0 or not pid:
            said = _engine_words(error or _last_line(err))
            raise runtime.StartFailed(f"{what + ' failed to start: ' if sidecar else ''}cannot run {argv[0]!r}: {said}")
        if before_start is not None:
            before_start(pid)
        prefix = f"sidecar/{sidecar}/" if sidecar else ""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                self.engine.podman, "start", "--attach", container,
                stdin=asyncio.subprocess.DEVNULL, stdout=out_write, stderr=err_write,
                env=self.engine.environment(), start_new_session=True, cwd=self.engine.directory,
            )  # fmt: skip
        finally:
            os.close(out_write)
            os.close(err_write)
        stdout, _ = await runtime.open_pipe(out_read)
        stderr, _ = await runtime.open_pipe(err_read)
        attached = Attached(
            container, pid, process, {f"{prefix}stdout": stdout, f"{prefix}stderr": stderr}, self.engine
        )
        self.containers.append(attached)
        # Return once the program runs (or has run): a stop or kill before then would find runc's init waiting for
        # its start, and the pid that runs is the one to signal.
        while process.returncode is None:
            running_pid, status, _, _ = await self.engine.state(container)
            if status not in ("created", "initialized"):
                attached.pid = running_pid or attached.pid
                break
            await asyncio.sleep(_READY_POLL)
        return attached

    def _container_flags(
        self,
        container: str,
        image: runtime.ContainerImage,
        argv: list[str],
        env_file: Path,
        passed: list[str],
        *,
        main: bool,
    ) -> list[str]:
        spec, layout = self.spec, self.spec.layout
        assert self._range is not None
        if self.standalone:
            where = ["--network", self._network, "--uidmap", self._range.uidmap, "--gidmap", self._range.uidmap]
            where += self._labels
        else:
            where = ["--pod", self.name]
        flags = [
            *where, "--name", container, "--init", "--pull", "never", "--log-driver", "none",
            "--security-opt", "no-new-privileges", "--cgroupns", "private", "--http-proxy=false",
            "--env-file", str(env_file), *(f"--env={name}" for name in passed),
            "--workdir", spec.working_dir, "--entrypoint", json.dumps(argv),
        ]  # fmt: skip
        for name in NODUS_DIRECTORIES:
            options = "ro,U" if name in READ_ONLY_DIRECTORIES else "rw,U"
            flags += ["--volume", f"{layout.nodus_dir / name}:{SANDBOX_NODUS_DIR}/{name}:{options}"]
        if layout.progress.is_file():
            flags += ["--volume", f"{layout.progress}:{PROGRESS_FILE}:rw,U"]
        flags += ["--volume", f"{self.run_dir}:{SANDBOX_RUN_DIR}:rw,U"]
        if spec.host_network:
            # A user namespace cannot mount a sysfs for the host's network namespace: the host's, read-only.
            flags += ["--volume", "/sys:/sys:ro"]
        if spec.bind_working_dir:
            flags += ["--volume", f"{layout.workdir}:{spec.working_dir}:rw,U"]
        for mount in spec.mounts:
            flags += ["--volume", f"{mount.source}:{mount.target}:{'ro' if mount.read_only else 'rw,U'}"]
        if main:
            limits = spec.limits
            if limits.cpus is not None:
                flags += ["--cpus", f"{limits.cpus:g}"]
            if limits.memory_bytes is not None:
                flags += ["--memory", str(limits.memory_bytes), "--memory-swap", str(limits.memory_bytes)]
            if limits.pids is not None:
                flags += ["--pids-limit", str(limits.pids)]
            for device in spec.devices:
                flags += ["--device", device]
        return [*flags, image.image_id]

    async def remove(self, *, grace: int | None = None) -> None:
        """Stop what still runs (SIGTERM, SIGKILL after ``grace`` seconds, by default the sidecars' 5), remove the
        pod and release what it held."""
        if self._removed:
            return
        self._removed = True
        try:
            if self.standalone:
                await self.engine.run("rm", "--force", "--time", "0", f"{self.name}-main")
                return
            if len(self.containers) > 1 and grace != 0:
                # Sidecars still run: SIGTERM first, as when the program ends on its own (ADR 0040).
                stop_grace = SIDECAR_STOP_GRACE if grace is None else grace
                await self.engine.run("pod", "stop", "--time", str(stop_grace), self.name)
            await self.engine.run("pod", "rm", "--force", "--time", "0", self.name)
        finally:
            for container in self.containers:
                with contextlib.suppress(ProcessLookupError):
                    container.process.kill()
                await container.process.wait()
            if self._forwarder is not None:
                self._forwarder.close()
            if self._proxy is not None:
                self._proxy.close()
                await self._proxy.wait_closed()
            if self._range is not None:
                self._range.release()


async def _give_back_stale_addresses(network: str, podman: str) -> None:
    """Before a container joins the ``Open`` network: when its range is more than half taken, the addresses of
    containers that are gone are given back (``nodus.agent.podaddresses``: CNI leaks them otherwise)."""
    from nodus.agent import podaddresses, podnet

    if podaddresses.crowded(network, podnet.ADDRESSES):
        await asyncio.to_thread(podaddresses.release_stale, network, podman)


def _environment(path: Path, env: dict[str, str]) -> tuple[Path, list[str]]:
    """Write ``env`` to a 0600 env file for ``--env-file``; multi-line values cannot go there, so their names
    are returned to be passed from podman's own environment (``--env NAME``). StartFailed for a multi-line
    value under a name podman itself reads."""
    passed = [name for name, value in env.items() if "\n" in value or "\r" in value]
    for name in passed:
        if name in _ENGINE_NAMES or name.startswith(_ENGINE_PREFIXES):
            raise runtime.StartFailed(
                f"environment variable {name} holds a line break, which the container engine can only take for names "
                "it does not read itself: put the value in a Secret mounted as a file, or use one line"
            )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        for name, value in env.items():
            if name not in passed:
                handle.write(f"{name}={value}\n")
    return path, passed


def _check_paths(spec: runtime.RunSpec) -> None:
    for path in (spec.working_dir, *(mount.target for mount in spec.mounts), *(str(m.source) for m in spec.mounts)):
        if any(character in path for character in _VOLUME_UNSAFE):
            raise runtime.StartFailed(f"the path {path!r} holds ':' or ',', which a container volume cannot name")


async def _last_output(stream: asyncio.StreamReader) -> str:
    with contextlib.suppress(Exception):
        text = (await asyncio.wait_for(stream.read(64 * 1024), 2)).decode(errors="replace").strip()
        return text.splitlines()[-1] if text else ""
    return ""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return _engine_words(lines[-1]) if lines else "no reason given"


def _engine_words(text: str) -> str:
    """The useful end of podman's error chain ("...: exec: \\"x\\": executable file not found in $PATH")."""
    text = text.removeprefix("Error: ").strip()
    marker = "unable to start container process: "
    if marker in text:
        text = text.split(marker, 1)[1]
    return text.removesuffix(": OCI runtime attempted to invoke a command that was not found")
