"""The fake cloud as a provider: a boot hands the host over as a private file after the boot time, faults and
terminations are markers the fake-host process acts on, and a new controller adopts a host from its boot file."""

from __future__ import annotations

import asyncio
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from nodus.client import ClientConfig
from nodus.cloud.fakeattempts import behaviour
from nodus.cloud.fakecloud import BOOT, KILL, TERMINATE, FakeCloud, FakeCloudConfig
from nodus.cloud.fakehosts import FakeHosts, FakeHostsSettings
from nodus.cloud.provider import FaultInjection, Provider


def cloud(tmp_path: Path, boot_time: float = 0.0) -> FakeCloud:
    return FakeCloud(FakeCloudConfig(directory=tmp_path / "fake", boot_time=timedelta(seconds=boot_time)))


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": "Booting"}}


OFFERING = {"metadata": {"name": "cpu-8c-us"}, "spec": {"gpus": 0, "vcpu": 8, "memory": "32Gi"}}


async def booted(provider: FakeCloud, name: str) -> Path:
    await provider.boot(node(name), OFFERING, "abcdef.0123456789abcdef")
    path = provider.config.directory / BOOT / f"{name}.json"
    for _ in range(100):
        if path.exists():
            return path
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def test_is_a_provider_that_injects_faults(tmp_path: Path) -> None:
    provider: Provider = cloud(tmp_path)
    assert isinstance(provider, FaultInjection)
    assert provider.name == "fake"


async def test_a_boot_hands_the_host_over_in_a_private_file(tmp_path: Path) -> None:
    provider = cloud(tmp_path)
    path = await booted(provider, "n1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    document = orjson.loads(path.read_bytes())
    assert document == {
        "node": "n1",
        "offering": "cpu-8c-us",
        "spec": OFFERING["spec"],
        "joinToken": document["joinToken"],
    }
    assert provider.is_up("n1")
    assert provider.annotations("n1") == {}


async def test_a_host_still_booting_can_fail_and_is_never_handed_over(tmp_path: Path) -> None:
    provider = cloud(tmp_path, boot_time=0.5)
    await provider.boot(node("n1"), OFFERING, "t")
    assert provider.fail_boot("n1")
    assert not provider.kill("n1")
    await asyncio.sleep(0.6)
    assert not (provider.config.directory / BOOT / "n1.json").exists()
    assert not provider.is_up("n1")


async def test_kill_and_terminate_leave_markers_and_a_new_controller_adopts_only_live_hosts(tmp_path: Path) -> None:
    provider = cloud(tmp_path)
    await booted(provider, "n1")
    await booted(provider, "n2")
    assert provider.kill("n1")
    assert not provider.is_up("n1")
    assert (provider.config.directory / KILL / "n1").exists()
    await provider.terminate("n2", 7)
    assert (provider.config.directory / TERMINATE / "n2").read_text() == "7.0"
    await provider.terminate("n2", 7)  # idempotent
    later = cloud(tmp_path)
    assert not later.adopt(node("n1")) and not later.adopt(node("n2"))
    await booted(provider, "n3")
    assert later.adopt(node("n3")) and later.is_up("n3")
    assert not later.adopt(node("n3"))  # tracked already


async def test_the_fake_host_process_takes_hosts_on_and_ends_them_by_their_markers(tmp_path: Path) -> None:
    provider = cloud(tmp_path)
    await booted(provider, "n1")
    await booted(provider, "n2")
    config = ClientConfig(server="https://127.0.0.1:1")
    hosts = FakeHosts(FakeHostsSettings(directory=provider.config.directory, server=config, observer=config))
    try:
        hosts.scan()
        assert set(hosts.hosts) == {"n1", "n2"}
        provider.kill("n1")
        hosts.scan()
        assert hosts.hosts["n1"].state == "gone"
        hosts.scan()
        assert set(hosts.hosts) == {"n2"}
        assert not (provider.config.directory / BOOT / "n1.json").exists()
        assert not (provider.config.directory / KILL / "n1").exists()
    finally:
        await hosts.close()


def test_a_fake_program_runs_as_long_and_ends_as_its_env_says() -> None:
    def attempt(**env: str) -> dict[str, Any]:
        return {"metadata": {"name": "a"}, "spec": {"env": [{"name": k, "value": v} for k, v in env.items()]}}

    default = timedelta(seconds=5)
    assert behaviour(attempt(), default) == (5.0, 0)
    assert behaviour(attempt(FAKEHOST_DURATION="1m30s", FAKEHOST_EXIT_CODE="3"), default) == (90.0, 3)
    # What does not parse is ignored: the defaults run, rather than failing the attempt.
    assert behaviour(attempt(FAKEHOST_DURATION="soon", FAKEHOST_EXIT_CODE="-1"), default) == (5.0, 0)
