"""This host's shape, as a pool host reports it on its Node: vCPU, memory, disk, GPUs and their interconnect.

A host that joins a Pool has no offering to describe it (ADR 0047): its agent looks. Each figure is what a
program started by this agent could use, so limits of the agent's own cgroup count:

- **vCPU**: the CPUs the agent may run on (``os.sched_getaffinity``), fewer when a cgroup v2 ``cpu.max``
  quota of its cgroup or an ancestor allows fewer (rounded up: a quota of 1.5 CPUs is 2 vCPU).
- **memory**: ``MemTotal`` of ``/proc/meminfo``, less when a cgroup v2 ``memory.max`` is lower.
- **disk**: the size of the work directory's file system that is not reserved for root (used + available).
- **GPUs**: :func:`nodus.agent.gpus.discover` (NVML, else ``nvidia-smi``): their count, model and memory.
  The model maps to an accelerator variant of the catalog (``nodus.apis.v1.accelerators``; "NVIDIA H100
  80GB HBM3" is ``h100-sxm-80g``) by family, form factor and memory; a model the catalog lacks keeps its
  family when one is recognised, and no variant.
- **interconnect**: ``nvidia-smi topo -m``: any ``NV#`` link between two GPUs is ``nvlink``, else ``pcie``;
  none without GPUs, and none when the matrix cannot be read.

Nothing here raises for a host that lacks something: no cgroup, no GPU and no ``nvidia-smi`` are all
ordinary; each reads as the host without it.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nodus.agent import gpus as host_gpus
from nodus.apis.v1 import accelerators

log = logging.getLogger(__name__)

Interconnect = Literal["nvlink", "pcie"]
_MIB = 2**20
# A catalog variant's memory matches a reported one within this fraction (drivers report a little less).
_MEMORY_TOLERANCE = 0.1
_TOPO_TIMEOUT_S = 30.0
_NVLINK = re.compile(r"^NV\d+$")


@dataclass(frozen=True)
class HostShape:
    """What this host offers; :meth:`capacity` is its Node's ``status.capacity``."""

    cpu: int
    memory_bytes: int
    disk_bytes: int
    gpus: tuple[host_gpus.Gpu, ...] = ()
    gpu_model: str | None = None
    accelerator: str | None = None
    family: str | None = None
    gpu_memory: str | None = None
    interconnect: Interconnect | None = None

    def capacity(self, gpu_count: int | None = None) -> dict[str, Any]:
        """The Node's ``status.capacity`` (``gpu_count`` overrides the GPUs found, as ``--gpus`` does)."""
        count = len(self.gpus) if gpu_count is None else gpu_count
        capacity: dict[str, Any] = {
            "cpu": str(self.cpu),
            "memory": quantity(self.memory_bytes),
            "disk": quantity(self.disk_bytes),
            "gpus": count,
        }
        if count:
            extra = {
                "accelerator": self.accelerator,
                "gpuFamily": self.family,
                "gpuModel": self.gpu_model,
                "gpuMemory": self.gpu_memory,
                "interconnect": self.interconnect,
            }
            capacity.update({key: value for key, value in extra.items() if value is not None})
        return capacity


def discover(
    work_dir: Path,
    nvidia_smi: str | None = None,
    *,
    nvml: bool = True,
    proc: Path = Path("/proc"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> HostShape:
    """This host's shape (see the module docstring). ``nvidia_smi``: the executable (default: the one on
    PATH now); ``nvml``: ask NVML first; ``proc`` and ``cgroup_root`` are where the kernel's files are."""
    smi = nvidia_smi if nvidia_smi is not None else shutil.which("nvidia-smi")
    cgroups = _own_cgroups(proc, cgroup_root)
    found = tuple(host_gpus.discover(smi, nvml=nvml))
    model = found[0].name if found else None
    if found and len({gpu.name for gpu in found}) > 1:
        log.warning(
            "this host has GPUs of several models (%s); it reports the first's", ", ".join(g.name for g in found)
        )
    variant, family = accelerator_for(model, found[0].memory_mib) if found else (None, None)
    gpu_memory = None
    if found:
        gpu_memory = quantity(variant.memory_bytes) if variant else f"{round(found[0].memory_mib / 1024)}Gi"
    return HostShape(
        cpu=_cpus(cgroups),
        memory_bytes=_memory(proc, cgroups),
        disk_bytes=_disk(work_dir),
        gpus=found,
        gpu_model=model,
        accelerator=variant.id if variant else None,
        family=family,
        gpu_memory=gpu_memory,
        interconnect=interconnect(smi) if found and smi else None,
    )


def accelerator_for(model: str | None, memory_mib: int) -> tuple[accelerators.Accelerator | None, str | None]:
    """The catalog variant of a GPU named ``model`` with ``memory_mib`` MiB, and its family; either may be None.

    The family is the catalog family the name spells as a word ("NVIDIA L40S" is L40S, never L4; "GeForce RTX
    4090" is RTX4090). Among its variants, those within 10% of the memory are kept; a name that says PCIe or
    SXM keeps that form; one that says neither is SXM when the family has both, since NVIDIA names its PCIe
    boards so ("NVIDIA H100 PCIe") and its SXM ones without ("NVIDIA H100 80GB HBM3")."""
    if not model:
        return None, None
    words = re.findall(r"[a-z0-9]+", model.lower())
    joined = {a + b for a, b in itertools.pairwise(words)}
    family = next(
        (f for f in sorted(accelerators.FAMILIES, key=len, reverse=True) if f.lower() in words or f.lower() in joined),
        None,
    )
    if family is None:
        return None, None
    form = "sxm" if any(w.startswith("sxm") for w in words) else "pcie" if "pcie" in words else None
    if "nvl" in words:
        return None, family  # the NVL boards (H100 NVL, H200 NVL) are not in the catalog
    memory = memory_mib * _MIB
    candidates = [
        a
        for a in accelerators.CATALOG
        if a.family == family and abs(a.memory_bytes - memory) <= _MEMORY_TOLERANCE * a.memory_bytes
    ]
    formed = [a for a in candidates if f"-{form or 'sxm'}-" in a.id]
    unformed = [a for a in candidates if "-sxm-" not in a.id and "-pcie-" not in a.id]
    chosen = formed or (unformed if form is None else [])
    return (chosen[0] if len(chosen) == 1 else None), family


def interconnect(nvidia_smi: str) -> Interconnect | None:
    """``nvlink`` when ``nvidia-smi topo -m`` shows an NVLink between two GPUs, ``pcie`` when it shows none,
    None when it cannot be read."""
    try:
        done = subprocess.run(
            [nvidia_smi, "topo", "-m"], capture_output=True, text=True, timeout=_TOPO_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        log.info("the GPU interconnect is unknown: %s topo -m could not be run (%s)", nvidia_smi, error)
        return None
    if done.returncode != 0:
        log.info("the GPU interconnect is unknown: %s topo -m exited %d", nvidia_smi, done.returncode)
        return None
    return interconnect_of(done.stdout.splitlines())


def interconnect_of(lines: Sequence[str]) -> Interconnect | None:
    """The interconnect the matrix of ``nvidia-smi topo -m`` shows (its rows are ``GPU<n>`` then one cell per GPU)."""
    rows = [line.split() for line in lines if re.match(r"^GPU\d+\s", line)]
    if not rows:
        return None
    return "nvlink" if any(_NVLINK.match(cell) for row in rows for cell in row[1:]) else "pcie"


def quantity(size: int) -> str:
    """``size`` bytes as a quantity of the largest binary unit that holds it whole, floored to MiB (``80Gi``)."""
    mib = max(size // _MIB, 0)
    for unit, factor in (("Ti", 1024 * 1024), ("Gi", 1024)):
        if mib and mib % factor == 0:
            return f"{mib // factor}{unit}"
    return f"{mib}Mi"


def _own_cgroups(proc: Path, root: Path) -> list[Path]:
    """This process's cgroup v2 directory and its ancestors up to the root (empty without cgroup v2)."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return []
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    if relative is None:
        return []
    directory = root / relative.strip().lstrip("/")
    return [directory, *[p for p in directory.parents if p.is_relative_to(root)]]


def _cpus(cgroups: list[Path]) -> int:
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    for directory in cgroups:
        try:
            quota, period = (directory / "cpu.max").read_text().split()[:2]
        except (OSError, ValueError):
            continue
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            count = min(count, max(math.ceil(int(quota) / int(period)), 1))
    return count


def _memory(proc: Path, cgroups: list[Path]) -> int:
    total = 0
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        log.warning("%s/meminfo cannot be read: the host reports no memory", proc)
    for directory in cgroups:
        try:
            limit = (directory / "memory.max").read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit)) if total else int(limit)
    return total


def _disk(work_dir: Path) -> int:
    """The work directory's file system (of its nearest existing ancestor, before it is made): used + available."""
    path = work_dir
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        stat = os.statvfs(path)
    except OSError:
        return 0
    return (stat.f_blocks - stat.f_bfree + stat.f_bavail) * stat.f_frsize
