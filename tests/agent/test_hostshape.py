"""A pool host's shape: GPUs and their interconnect from a fake ``nvidia-smi`` (its CSV and ``topo -m``), the
model mapped onto the accelerator catalog, and vCPU and memory capped by cgroup v2 limits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodus.agent import hostshape

H100_TOPO = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\t0-51\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tNV18\t0-51\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tNV18\t0-51\t0\t\tN/A
GPU3\tNV18\tNV18\tNV18\t X \t0-51\t0\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

PCIE_TOPO = """\
\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPHB\t0-15\t0
GPU1\tPHB\t X \t0-15\t0

Legend:
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def fake_nvidia_smi(directory: Path, gpus: list[str], topo: str | None) -> str:
    """An ``nvidia-smi`` answering ``--query-gpu`` with ``gpus`` (CSV lines) and ``topo -m`` with ``topo``
    (None: it fails, as an old driver without topology support would)."""
    (directory / "gpus.csv").write_text("".join(f"{line}\n" for line in gpus))
    if topo is not None:
        (directory / "topo.txt").write_text(topo)
    path = directory / "nvidia-smi"
    path.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  topo) [ -f "{directory}/topo.txt" ] || {{ echo "topology not supported" >&2; exit 3; }}\n'
        f'        cat "{directory}/topo.txt" ;;\n'
        f'  --query-gpu=*) cat "{directory}/gpus.csv" ;;\n'
        '  *) echo "unexpected: $*" >&2; exit 2 ;;\n'
        "esac\n"
    )
    path.chmod(0o755)
    return str(path)


def h100s(count: int) -> list[str]:
    return [f"{i}, GPU-{i:04d}-aaaa, NVIDIA H100 80GB HBM3, 81559" for i in range(count)]


def test_four_h100s_joined_by_nvlink(tmp_path: Path) -> None:
    smi = fake_nvidia_smi(tmp_path, h100s(4), H100_TOPO)
    shape = hostshape.discover(tmp_path, smi, nvml=False)
    capacity = shape.capacity()
    assert capacity["gpus"] == 4
    assert {k: capacity[k] for k in ("accelerator", "gpuFamily", "gpuModel", "gpuMemory", "interconnect")} == {
        "accelerator": "h100-sxm-80g",
        "gpuFamily": "H100",
        "gpuModel": "NVIDIA H100 80GB HBM3",
        "gpuMemory": "80Gi",
        "interconnect": "nvlink",
    }
    assert [gpu.index for gpu in shape.gpus] == [0, 1, 2, 3]


def test_pcie_gpus_and_an_unreadable_topology(tmp_path: Path) -> None:
    l4s = [f"{i}, GPU-{i}, NVIDIA L4, 23034" for i in range(2)]
    (tmp_path / "pcie").mkdir()
    (tmp_path / "old").mkdir()
    pcie = hostshape.discover(tmp_path, fake_nvidia_smi(tmp_path / "pcie", l4s, PCIE_TOPO), nvml=False)
    assert pcie.interconnect == "pcie"
    shape = hostshape.discover(tmp_path, fake_nvidia_smi(tmp_path / "old", l4s, None), nvml=False)
    assert shape.accelerator == "l4-24g" and shape.gpu_memory == "24Gi" and shape.interconnect is None
    assert "interconnect" not in shape.capacity()


def test_a_host_without_gpus_reports_none(tmp_path: Path) -> None:
    for smi in (fake_nvidia_smi(tmp_path, [], H100_TOPO), str(tmp_path / "absent" / "nvidia-smi")):
        shape = hostshape.discover(tmp_path, smi, nvml=False)
        capacity = shape.capacity()
        assert capacity["gpus"] == 0
        assert set(capacity) == {"cpu", "memory", "disk", "gpus"}
        assert int(capacity["cpu"]) >= 1 and capacity["memory"] != "0Mi" and capacity["disk"] != "0Mi"


def test_gpus_override_hides_what_was_found(tmp_path: Path) -> None:
    shape = hostshape.discover(tmp_path, fake_nvidia_smi(tmp_path, h100s(2), H100_TOPO), nvml=False)
    assert shape.capacity(gpu_count=0) == {
        k: v for k, v in shape.capacity().items() if k in ("cpu", "memory", "disk")
    } | {"gpus": 0}


@pytest.mark.parametrize(
    ("model", "memory_mib", "accelerator", "family"),
    [
        pytest.param("NVIDIA H100 80GB HBM3", 81559, "h100-sxm-80g", "H100", id="h100-sxm"),
        pytest.param("NVIDIA H100 PCIe", 81559, "h100-pcie-80g", "H100", id="h100-pcie"),
        pytest.param("NVIDIA H100 NVL", 95830, None, "H100", id="h100-nvl-not-in-catalog"),
        pytest.param("NVIDIA A100-SXM4-80GB", 81920, "a100-sxm-80g", "A100", id="a100-sxm-80"),
        pytest.param("NVIDIA A100-SXM4-40GB", 40960, None, "A100", id="a100-sxm-40-not-in-catalog"),
        pytest.param("NVIDIA A100-PCIE-40GB", 40960, "a100-pcie-40g", "A100", id="a100-pcie-40"),
        pytest.param("NVIDIA H200", 143771, "h200-sxm-141g", "H200", id="h200"),
        pytest.param("NVIDIA B200", 183359, "b200-sxm-192g", "B200", id="b200"),
        pytest.param("NVIDIA L40S", 46068, "l40s-48g", "L40S", id="l40s-not-l4"),
        pytest.param("NVIDIA L4", 23034, "l4-24g", "L4", id="l4"),
        pytest.param("NVIDIA A10G", 23028, "a10g-24g", "A10G", id="a10g"),
        pytest.param("NVIDIA GeForce RTX 4090", 24564, "rtx4090-24g", "RTX4090", id="rtx4090"),
        pytest.param("Tesla T4", 15360, None, None, id="unknown-family"),
    ],
)
def test_models_map_onto_the_catalog(model: str, memory_mib: int, accelerator: str | None, family: str | None) -> None:
    variant, found_family = hostshape.accelerator_for(model, memory_mib)
    assert (variant.id if variant else None, found_family) == (accelerator, family)


def test_cgroup_limits_cap_cpu_and_memory(tmp_path: Path) -> None:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/agents/nodus\n")
    (proc / "meminfo").write_text("MemTotal:       65536000 kB\nMemFree:        1000 kB\n")
    own = root / "agents" / "nodus"
    own.mkdir(parents=True)
    (own / "cpu.max").write_text("max 100000\n")
    (own / "memory.max").write_text("max\n")
    (root / "agents" / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: 2 vCPU
    (root / "agents" / "memory.max").write_text(f"{8 * 2**30}\n")
    shape = hostshape.discover(tmp_path, str(tmp_path / "no-smi"), nvml=False, proc=proc, cgroup_root=root)
    assert shape.cpu == min(2, len(os.sched_getaffinity(0)))
    assert shape.capacity()["memory"] == "8Gi"
    without = hostshape.discover(tmp_path, str(tmp_path / "no-smi"), nvml=False, proc=proc, cgroup_root=tmp_path / "x")
    assert without.capacity()["memory"] == f"{65536000 // 1024}Mi"


@pytest.mark.parametrize(
    ("size", "shown"),
    [(80 * 2**30, "80Gi"), (2 * 2**40, "2Ti"), (1536 * 2**20, "1536Mi"), (2**20 + 5, "1Mi"), (0, "0Mi")],
)
def test_quantities(size: int, shown: str) -> None:
    assert hostshape.quantity(size) == shown
