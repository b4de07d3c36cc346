"""Addresses of the Open network that gone containers still hold are given back, on real podman: a file naming a
container podman knows stays, one naming a gone container goes once it is old enough, a fresh one stays.

The allocator's directory is a temporary one laid out as CNI's ``host-local`` keeps it (one file per address
holding the container's id, a ``lock`` file), so the machine's own allocations are never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.agent import podaddresses, podnet

pytestmark = pytest.mark.skipif(shutil.which("podman") is None or os.geteuid() != 0, reason="needs podman and root")

PODMAN = ["podman", "--cgroup-manager=cgroupfs"]


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """The full id of a created (never started) container, removed afterwards."""
    from nodus.cli import devimages

    cache = Path(__file__).resolve().parents[2] / ".cache" / "images"
    image = devimages.import_into_podman(devimages.base_tarball(cache), "localhost/nodus/base:" + devimages.tag())
    name = f"nodus-addr-{uuid.uuid4().hex[:8]}"
    created = subprocess.run(
        [*PODMAN, "create", "--name", name, "--network", "none", image, "true"],
        capture_output=True,
        text=True,
        check=True,
    )
    try:
        yield created.stdout.strip()
    finally:
        subprocess.run([*PODMAN, "rm", "--force", name], capture_output=True, check=False)


def allocate(directory: Path, address: str, holder: str, age: float) -> Path:
    path = directory / address
    path.write_text(f"{holder}\neth0")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_only_old_addresses_of_gone_containers_are_given_back(tmp_path: Path, container: str) -> None:
    directory = tmp_path / "nodus"
    directory.mkdir()
    (directory / "lock").touch()
    (directory / "last_reserved_ip.0").write_text("10.89.64.9")
    held = allocate(directory, "10.89.64.2", container, age=3600)
    gone = allocate(directory, "10.89.64.3", uuid.uuid4().hex * 2, age=3600)
    fresh = allocate(directory, "10.89.64.4", uuid.uuid4().hex * 2, age=5)

    assert podaddresses.release_stale("nodus", data=tmp_path) == 1

    assert held.exists() and fresh.exists() and not gone.exists()
    assert (directory / "last_reserved_ip.0").exists() and (directory / "lock").exists()
    # Later, the fresh one is old and its container still gone.
    assert podaddresses.release_stale("nodus", data=tmp_path, now=time.time() + podaddresses.MIN_AGE) == 1
    assert held.exists() and not fresh.exists()


def test_a_range_is_crowded_past_half_its_addresses(tmp_path: Path) -> None:
    directory = tmp_path / "nodus"
    directory.mkdir()
    (directory / "lock").touch()
    (directory / "last_reserved_ip.0").write_text("10.89.64.9")
    for host in range(2, 2 + podnet.ADDRESSES // 2):
        allocate(directory, f"10.89.64.{host}", "x", age=0)
    assert not podaddresses.crowded("nodus", podnet.ADDRESSES, data=tmp_path)
    allocate(directory, "10.89.64.254", "x", age=0)
    assert podaddresses.crowded("nodus", podnet.ADDRESSES, data=tmp_path)
    assert not podaddresses.crowded("absent", podnet.ADDRESSES, data=tmp_path)


def test_nothing_is_given_back_when_podman_cannot_list(tmp_path: Path) -> None:
    directory = tmp_path / "nodus"
    directory.mkdir()
    kept = allocate(directory, "10.89.64.2", "gone", age=3600)
    assert podaddresses.release_stale("nodus", podman=str(tmp_path / "no-podman"), data=tmp_path) == 0
    assert kept.exists()
