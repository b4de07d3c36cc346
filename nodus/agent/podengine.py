"""How the agent calls podman (ADR 0040): one containers.conf of the agent's own, and the CLI as a coroutine.

The configuration pins what this kind of host needs: the cgroupfs manager and runc (crun cannot run on a
cgroup v1 hybrid host), catatonit as every container's init, podman's own proxy variables kept out of
containers, and default ulimits within the host's hard limits (podman's defaults exceed them where the
agent lacks CAP_SYS_RESOURCE, and every container, a pod's infra included, would fail to start).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from nodus.agent import runtime

HOW_TO_FIX = (
    "install podman, runc and catatonit (`make` runs .ci/install-system-packages) and run the agent as root, or "
    "start it with --runtime bubblewrap (programs on the host's filesystem, images not pulled)"
)


class Engine:
    """How the agent calls podman: one containers.conf of its own (cgroupfs, runc, catatonit, ulimits within
    this host's hard limits, which podman's defaults exceed without CAP_SYS_RESOURCE)."""

    def __init__(self, podman: str, conf: Path) -> None:
        self.podman = podman
        self.conf = conf

    @property
    def directory(self) -> Path:
        """The engine's own directory: podman runs there, since conmon leaves files (an ``oom`` marker) in its
        working directory."""
        return self.conf.parent

    @classmethod
    def configured(cls, work_dir: Path, podman: str | None = None) -> Engine:
        found = podman or shutil.which("podman")
        if found is None:
            raise runtime.RuntimeUnavailable(f"podman not found on PATH: {HOW_TO_FIX}")
        work_dir.mkdir(parents=True, exist_ok=True)
        conf = work_dir / "containers.conf"
        # Within the agent's own hard limits (raising one needs CAP_SYS_RESOURCE), and RLIMIT_NPROC at most the
        # kernel's pid_max: runc is refused a higher one on these hosts.
        nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1 << 20)
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], _pid_max())
        init = shutil.which("catatonit") or "/usr/bin/catatonit"
        conf.write_text(
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
            f'init_path = "{init}"\n'
            "http_proxy = false\n"
            "[engine]\n"
            'cgroup_manager = "cgroupfs"\n'
            'runtime = "runc"\n'
            'events_logger = "file"\n'
        )
        return cls(found, conf)

    def environment(self, extra: Mapping[str, str] = {}) -> dict[str, str]:
        own = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "CONTAINERS_CONF": str(self.conf)}
        return {**extra, **own}

    async def run(self, *args: str, timeout: float = 120.0, env: Mapping[str, str] = {}) -> tuple[int, str, str]:
        """``podman args``: (exit status, stdout, stderr); killed after ``timeout`` or when cancelled.

        ``env`` is added to podman's own environment (values a ``--env NAME`` takes from there)."""
        proc = await asyncio.create_subprocess_exec(
            self.podman,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.environment(env),
            cwd=self.directory,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    async def state(self, container: str) -> tuple[int, str, int, str]:
        """(init host pid, status, exit code, error) of ``container``; pid 0 when not running."""
        code, out, _ = await self.run(
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.State.Pid}}|{{.State.Status}}|{{.State.ExitCode}}|{{.State.Error}}",
            container,
        )
        if code != 0:
            return 0, "gone", 0, ""
        pid, status, exit_code, error = out.strip().split("|", 3)
        return int(pid), status, int(exit_code), error


def _pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 32768


HOST_LABEL = "nodus.host"


def remove_pods_under(directory: Path, podman: str = "podman") -> int:
    """Remove every attempt pod, and every attempt container that stands alone, whose host directory (label
    :data:`HOST_LABEL`, the agent's ``--work-dir``) is ``directory`` or below it; how many there were. Blocking.

    Containers outlive the agent that started them (conmon keeps them): an agent starting again removes its own
    earlier ones (their attempts are run afresh), and whoever takes a host down for good (the simulated cloud, a
    test) removes what its agent left."""
    base = directory.resolve()
    removed = 0
    for kind, listing, removal in (
        ("pods", ["pod", "ps"], ["pod", "rm"]),
        ("containers", ["ps", "--all", "--filter", f"label={HOST_LABEL}"], ["rm"]),
    ):
        try:
            listed = subprocess.run(
                [podman, *listing, "--format", "json"], capture_output=True, text=True, timeout=60, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        names = []
        for item in json.loads(listed or "[]"):
            host = (item.get("Labels") or {}).get(HOST_LABEL)
            # A pod's own containers carry no label of their own: they go with their pod.
            name = item["Name"] if kind == "pods" else (item.get("Names") or [""])[0]
            if host and name and Path(host).is_relative_to(base):
                names.append(str(name))
        if names:
            subprocess.run(
                [podman, *removal, "--force", "--time", "0", *names], capture_output=True, timeout=300, check=False
            )
        removed += len(names)
    return removed
