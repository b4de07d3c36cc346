"""The container runtime through real podman, runc and the base image: exits, signals, OOM from the kernel,
limits, whole-tree stops, the cgroup freezer, user namespaces, environment, sidecars and the Deny network
(ADR 0040)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodus.agent import runtime
from nodus.agent.layout import AttemptLayout

pytestmark = pytest.mark.integration  # real programs and engines: left out of `make test-fast`

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HANG_GUARD = 120.0
MIB = 1024 * 1024


def shell(layout: AttemptLayout, image: runtime.ContainerImage, script: str, **changes: object) -> runtime.RunSpec:
    spec = runtime.RunSpec(
        argv=["/bin/sh", "-c", script], env={"PATH": PATH}, working_dir="/workspace", layout=layout, image=image
    )
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


async def run(containers: runtime.Runtime, spec: runtime.RunSpec) -> tuple[list[tuple[str, str]], runtime.Exit]:
    process = await containers.start(spec)
    lines = await asyncio.wait_for(drained(process.lines()), HANG_GUARD)
    return lines, await asyncio.wait_for(process.wait(), HANG_GUARD)


async def drained(lines: AsyncIterator[tuple[str, str]]) -> list[tuple[str, str]]:
    return [item async for item in lines]


def said(lines: list[tuple[str, str]], stream: str = "stdout") -> list[str]:
    return [line for name, line in lines if name == stream]


async def test_exit_codes_output_and_environment(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    env = {"PATH": PATH, "ONE": "a b=c 'q'", "PEM": "-----BEGIN-----\nline\n-----END-----", "EMPTY": ""}
    script = 'echo out; echo err >&2; printf "%s|" "$ONE" "$EMPTY"; echo; printf "%s" "$PEM" | wc -l; pwd; exit 3'
    lines, ended = await run(containers, shell(layout, base_image, script, env=env))
    assert ended == runtime.Exit(code=3, signal=None, oom_killed=False, stopped=False)
    assert said(lines) == ["out", "a b=c 'q'||", "2", "/workspace"]
    assert said(lines, "stderr") == ["err"]
    # The environment went through a private file, removed once the container was created.
    assert not list(layout.directory.glob(".*.env"))


async def test_a_signal_death_is_a_signal_and_an_oom_kill_comes_from_the_kernel(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    _, ended = await run(containers, shell(layout, base_image, "kill -TERM $$; sleep 5"))
    assert (ended.code, ended.signal, ended.oom_killed) == (None, signal.SIGTERM, False)

    hog = "python3 -c 'x = bytearray(512 * 1024 * 1024)'"
    _, ended = await run(containers, shell(layout, base_image, hog, limits=runtime.Limits(memory_bytes=64 * MIB)))
    assert ended.oom_killed and ended.signal == signal.SIGKILL, ended
    # Without the limit the same program succeeds: the kill was the limit's.
    _, ended = await run(containers, shell(layout, base_image, hog))
    assert ended.succeeded


async def test_limits_are_the_containers(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    limits = runtime.Limits(cpus=0.5, memory_bytes=96 * MIB, pids=64)
    script = (
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us "
        "/sys/fs/cgroup/pids/pids.max"
    )
    lines, ended = await run(containers, shell(layout, base_image, script, limits=limits))
    assert ended.succeeded, lines
    assert said(lines) == [str(96 * MIB), "50000", "64"]


async def test_stop_reaches_every_process_and_kill_ends_the_namespace(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    # A child in a session of its own saves its work on SIGTERM; the shell waits for it.
    script = (
        "trap 'wait; exit 0' TERM; "
        'setsid sh -c \'trap "echo saved > /nodus/outputs/saved; exit 0" TERM; touch /nodus/outputs/trapped; '
        "while :; do sleep 0.1; done' & echo up; wait"
    )
    process = await containers.start(shell(layout, base_image, script))
    lines = asyncio.create_task(drained(process.lines()))
    # The child has its trap once it says so (a busy machine may take a while to get there).
    while not (layout.nodus_dir / "outputs" / "trapped").exists():
        await asyncio.sleep(0.05)
    ended = await asyncio.wait_for(process.stop(30), HANG_GUARD)
    assert ended.stopped and ended.code == 0, ended
    assert (layout.nodus_dir / "outputs" / "saved").read_text() == "saved\n"
    assert said(await lines) == ["up"]

    process = await containers.start(shell(layout, base_image, "trap '' TERM; sleep 300"))
    ended = await asyncio.wait_for(process.kill(), HANG_GUARD)
    assert (ended.signal, ended.stopped, ended.oom_killed) == (signal.SIGKILL, True, False)


async def test_freeze_pauses_the_whole_container(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    script = "i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo $i > /nodus/outputs/count; sleep 0.02; done"
    process = await containers.start(shell(layout, base_image, script))
    count = layout.nodus_dir / "outputs" / "count"
    while not count.exists() or not count.read_text().strip():
        await asyncio.sleep(0.05)
    process.freeze()
    await asyncio.sleep(0.2)
    frozen = count.read_text()
    await asyncio.sleep(0.5)
    assert count.read_text() == frozen
    process.thaw()
    await asyncio.sleep(0.5)
    assert count.read_text() != frozen
    await process.kill()


async def test_root_in_the_image_is_not_root_on_the_host(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    script = "id -u; touch /nodus/outputs/mine; cat /proc/self/uid_map; cat /proc/1/status | grep -c NoNewPrivs"
    lines, ended = await run(containers, shell(layout, base_image, script))
    assert ended.succeeded, lines
    inside, uid_map = said(lines)[0], said(lines)[1].split()
    assert inside == "0" and uid_map[0] == "0" and int(uid_map[1]) >= 100_000_000
    owner = os.stat(layout.nodus_dir / "outputs" / "mine").st_uid
    assert owner == int(uid_map[1]) != 0
    # Two attempts at once hold different ranges.
    other = AttemptLayout.create(layout.root, "other-0-1")
    first, second = await asyncio.gather(
        run(containers, shell(layout, base_image, "cat /proc/self/uid_map; sleep 1")),
        run(containers, shell(other, base_image, "cat /proc/self/uid_map; sleep 1")),
    )
    assert said(first[0])[0].split()[1] != said(second[0])[0].split()[1]


async def test_the_program_sees_no_host_path_and_inputs_are_read_only(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout, tmp_path: Path
) -> None:
    (tmp_path / "host-secret").write_text("agent credential")
    script = (
        f"test -e {tmp_path}/host-secret && echo host-visible; "
        "test -S /run/podman/podman.sock && echo engine-socket; "
        "touch /nodus/inputs/x 2>/dev/null && echo inputs-writable; "
        "ls /proc | grep -c '^[0-9]'; echo done"
    )
    lines, ended = await run(containers, shell(layout, base_image, script))
    assert ended.succeeded, lines
    assert said(lines)[-1] == "done" and "host-visible" not in said(lines)
    assert "engine-socket" not in said(lines) and "inputs-writable" not in said(lines)


async def test_deny_has_only_loopback(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    script = "ls /sys/class/net | tr '\\n' ' '"
    lines, ended = await run(containers, shell(layout, base_image, script, egress=runtime.Egress(policy="Deny")))
    assert ended.succeeded, lines
    assert said(lines) == ["lo "]


async def test_sidecars_share_the_network_and_volumes_and_end_after_the_program(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    server = (
        "python3 -c 'import socket,os; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        's.bind(("127.0.0.1", 7070)); s.listen(); open(os.environ["NODUS_READY_FILE"], "w").close(); '
        'c, _ = s.accept(); c.sendall(b"pong\\n"); c.close(); import time; time.sleep(300)\''
    )
    helper = runtime.Sidecar(name="server", argv=["/bin/sh", "-c", server], env={"PATH": PATH})
    client = (
        'python3 -c \'import socket; s = socket.create_connection(("127.0.0.1", 7070)); '
        "print(s.recv(10).decode().strip())'"
    )
    spec = shell(layout, base_image, client, egress=runtime.Egress(policy="Deny"), sidecars=(helper,))
    lines, ended = await run(containers, spec)
    assert ended.succeeded, lines
    assert said(lines) == ["pong"]

    failing = runtime.Sidecar(name="broken", argv=["/bin/sh", "-c", "echo cannot >&2; exit 4"], env={"PATH": PATH})
    with pytest.raises(runtime.StartFailed, match=r"sidecar broken failed to start: .*code 4.*cannot"):
        await containers.start(shell(layout, base_image, "true", sidecars=(failing,)))


async def test_hostile_mount_paths_are_refused(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout, tmp_path: Path
) -> None:
    mount = runtime.Mount(source=tmp_path, target="/data:/etc", read_only=True)
    with pytest.raises(runtime.StartFailed, match="':' or ','"):
        await containers.start(shell(layout, base_image, "true", mounts=(mount,)))


async def test_a_program_writing_past_its_disk_is_evicted(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, layout: AttemptLayout
) -> None:
    from nodus.agent.podman import PodmanRuntime

    assert isinstance(containers, PodmanRuntime)
    quick = PodmanRuntime(containers.engine, userns=containers.userns, disk_interval=0.2)
    # Written to the image's own filesystem: its writable layer counts, as the attempt's directories do.
    script = "dd if=/dev/zero of=/var/tmp/fill bs=1M count=60 2>/dev/null; sleep 300"
    _, ended = await run(quick, shell(layout, base_image, script, limits=runtime.Limits(disk_bytes=20 * MIB)))
    assert (ended.evicted, ended.signal) == ("EphemeralStorageExceeded", signal.SIGKILL), ended
    assert "over resources.disk" in ended.evicted_message
    _, ended = await run(
        quick,
        shell(
            layout,
            base_image,
            "dd if=/dev/zero of=/var/tmp/fill bs=1M count=5",
            limits=runtime.Limits(disk_bytes=20 * MIB),
        ),
    )
    assert ended.succeeded and ended.evicted is None, ended


async def test_pods_left_by_a_dead_agent_are_removed_by_host(
    containers: runtime.Runtime, base_image: runtime.ContainerImage, tmp_path: Path
) -> None:
    """Containers outlive their agent: whoever takes the host down removes its pods, and only its own."""
    from nodus.agent import podengine

    mine = AttemptLayout.create(tmp_path / "host-a" / "attempts", "p.left-0-1")
    theirs = AttemptLayout.create(tmp_path / "host-b" / "attempts", "p.kept-0-1")
    left = await containers.start(shell(mine, base_image, "sleep 300"))
    kept = await containers.start(shell(theirs, base_image, "sleep 300"))
    try:
        assert await asyncio.to_thread(podengine.remove_pods_under, tmp_path / "host-a") == 1
        ended = await asyncio.wait_for(left.wait(), HANG_GUARD)
        assert ended.signal == signal.SIGKILL, ended
        assert await asyncio.to_thread(podengine.remove_pods_under, tmp_path / "host-a") == 0
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(kept.wait()), 0.5)
    finally:
        await kept.kill()
