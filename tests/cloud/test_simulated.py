"""The simulated cloud as a provider: it records on each Node what a later controller needs to adopt the
host (its agent's pid), a new controller adopts live hosts from that record (or from the host's pid file
when the record was never written), and it lets users inject faults."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodus.cloud.provider import FaultInjection, Provider
from nodus.cloud.simulated import PID_ANNOTATION, PID_FILE, SimulatedCloud, SimulatedCloudConfig


def cloud(tmp_path: Path) -> SimulatedCloud:
    return SimulatedCloud(SimulatedCloudConfig(kubeconfig=tmp_path / "kubeconfig", work_dir=tmp_path / "hosts"))


def node(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations or {}}, "status": {"phase": "Ready"}}


@pytest.fixture
def host() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for a host's agent, in its own session as the simulated cloud starts them."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def test_is_a_provider_that_injects_faults(tmp_path: Path) -> None:
    provider: Provider = cloud(tmp_path)
    assert isinstance(provider, FaultInjection)
    assert provider.name == "sim"


def test_a_new_controller_adopts_a_host_from_its_nodes_record(tmp_path: Path, host: subprocess.Popen[bytes]) -> None:
    first = cloud(tmp_path)
    assert first.annotations("h1") == {}, "nothing to record before there is a host"
    assert first.adopt(node("h1", {PID_ANNOTATION: str(host.pid)}))
    record = first.annotations("h1")
    assert record == {PID_ANNOTATION: str(host.pid)}
    assert not first.adopt(node("h1", record)), "a host it tracks is not adopted twice"

    second = cloud(tmp_path)
    assert second.adopt(node("h1", record))
    assert second.is_up("h1")


def test_a_host_whose_node_has_no_record_is_adopted_from_its_pid_file(
    tmp_path: Path, host: subprocess.Popen[bytes]
) -> None:
    (tmp_path / "hosts" / "h1").mkdir(parents=True)
    (tmp_path / "hosts" / "h1" / PID_FILE).write_text(str(host.pid))
    provider = cloud(tmp_path)
    assert provider.adopt(node("h1"))
    assert provider.annotations("h1") == {PID_ANNOTATION: str(host.pid)}


def test_a_host_that_is_gone_is_not_adopted(tmp_path: Path, host: subprocess.Popen[bytes]) -> None:
    host.kill()
    host.wait()
    provider = cloud(tmp_path)
    assert not provider.adopt(node("h1", {PID_ANNOTATION: str(host.pid)}))
    assert not provider.is_up("h1")
    assert provider.annotations("h1") == {}


def test_fail_boot_needs_a_booting_host(tmp_path: Path, host: subprocess.Popen[bytes]) -> None:
    provider = cloud(tmp_path)
    assert not provider.fail_boot("h1"), "no host at all"
    provider.adopt(node("h1", {PID_ANNOTATION: str(host.pid)}))
    assert not provider.fail_boot("h1"), "a running host has booted already"
