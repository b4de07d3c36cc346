"""Ephemeral disk: the measure on real trees (hard links, sparse files, links out, trees deeper than PATH_MAX,
trees vanishing mid-walk) and the watch on a real podman container's writable layer (ADR 0040)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.agent import disk
from nodus.agent.layout import AttemptLayout
from nodus.agent.podengine import Engine
from tests.support import images

MIB = 1024 * 1024
GIB = 1024 * MIB
HANG_GUARD = 120.0
PODMAN = [
    "podman", "--cgroup-manager=cgroupfs", "run", "-d",
    "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096",
]  # fmt: skip


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def allocated(path: Path) -> int:
    return os.lstat(path).st_blocks * disk.BLOCK


def test_a_hard_linked_file_counts_once_even_across_paths(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    data = write(one / "data", 4 * MIB)
    os.link(data, one / "again")
    two.mkdir()
    os.link(data, two / "elsewhere")
    alone = disk.usage([one])
    assert 4 * MIB <= alone < 5 * MIB
    assert disk.usage([one, two]) == alone + allocated(two)
    # A path inside another one adds nothing.
    assert disk.usage([one, one, tmp_path]) == disk.usage([tmp_path])


def test_a_sparse_file_counts_its_blocks_not_its_size(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse"
    with sparse.open("wb") as handle:
        handle.truncate(GIB)
        handle.seek(GIB // 2)
        handle.write(os.urandom(MIB))
    assert sparse.stat().st_size == GIB
    used = disk.usage([tmp_path])
    assert MIB <= used < 2 * MIB


def test_links_out_of_the_tree_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside / "big", 8 * MIB)
    tree = tmp_path / "tree"
    write(tree / "small", 4096)
    (tree / "to-dir").symlink_to(outside)
    (tree / "to-file").symlink_to(outside / "big")
    (tree / "to-root").symlink_to("/")
    used = disk.usage([tree])
    assert used < MIB
    # A root path that is itself a link counts as the link, never its target.
    (tmp_path / "root-link").symlink_to(outside)
    assert disk.usage([tmp_path / "root-link"]) < MIB


def test_a_tree_deeper_than_path_max_hides_nothing(tmp_path: Path) -> None:
    # A tenant nesting directories past PATH_MAX: a walk by path could not reach the bottom.
    name = "d" * 250
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(40):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        bottom = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.write(bottom, os.urandom(6 * MIB))
        os.close(bottom)
    finally:
        os.close(fd)
    assert disk.usage([tmp_path]) >= 6 * MIB


def test_missing_paths_count_nothing_and_a_file_path_counts_itself(tmp_path: Path) -> None:
    file = write(tmp_path / "file", MIB)
    assert disk.usage([tmp_path / "nowhere", file]) == allocated(file)
    assert disk.usage([]) == 0


def test_a_tree_vanishing_and_changing_mid_walk_does_not_raise(tmp_path: Path) -> None:
    stop = threading.Event()

    def churn() -> None:
        # Directories created, swapped for links and files, and removed while the walk runs.
        round = 0
        while not stop.is_set():
            top = tmp_path / f"t{round % 3}"
            for index in range(30):
                (top / f"a{index}" / "b" / "c").mkdir(parents=True, exist_ok=True)
                (top / f"a{index}" / "b" / "c" / "f").write_bytes(b"x" * 8192)
            shutil.rmtree(top / "a0", ignore_errors=True)
            (top / "a0").symlink_to("/")
            shutil.rmtree(top, ignore_errors=True)
            round += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for _ in range(300):
            assert disk.usage([tmp_path, tmp_path / "t0", tmp_path / "t1" / "a3"]) >= 0
    finally:
        stop.set()
        worker.join()


def test_writable_paths_are_what_the_program_can_write(tmp_path: Path) -> None:
    layout = AttemptLayout.create(tmp_path, "train-0-1")
    paths = disk.writable_paths(layout, layout.directory / "run")
    for writable in (layout.scratch, layout.outputs, layout.state, layout.checkpoint, layout.workdir):
        assert writable in paths
    assert layout.directory / "run" in paths and layout.progress in paths
    assert layout.inputs not in paths and layout.connections not in paths


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return Engine.configured(tmp_path / "engine")


@pytest.fixture
def container() -> Iterator[str]:
    """A container name, removed with its writable layer after the test."""
    name = f"nodus-disk-{uuid.uuid4().hex[:12]}"
    yield name
    subprocess.run(
        ["podman", "--cgroup-manager=cgroupfs", "rm", "-f", "-t", "0", name], check=False, capture_output=True
    )


def run(name: str, script: str) -> None:
    subprocess.run([*PODMAN, "--name", name, images.base_image(), "/bin/sh", "-c", script], check=True, timeout=120)


async def test_what_a_container_writes_into_its_image_shows_in_its_upper_dir(engine: Engine, container: str) -> None:
    run(container, "head -c 41943040 /dev/urandom > /var/tmp/blob")
    await engine.run("wait", container)
    upper = await disk.upper_dir(engine, container)
    assert (upper / "var" / "tmp" / "blob").is_file()
    assert 40 * MIB <= disk.usage([upper]) < 41 * MIB


async def test_an_unknown_container_has_no_upper_dir(engine: Engine) -> None:
    with pytest.raises(LookupError):
        await disk.upper_dir(engine, f"nodus-disk-absent-{uuid.uuid4().hex[:8]}")


async def test_the_watch_fires_once_on_a_container_over_its_limit_then_stops(
    tmp_path: Path, engine: Engine, container: str
) -> None:
    fired: list[int] = []
    done = asyncio.Event()

    def exceeded(used: int) -> None:
        fired.append(used)
        done.set()

    scratch = tmp_path / "scratch"
    write(scratch / "notes", MIB)
    watch = disk.DiskWatch([scratch], 20 * MIB, exceeded, interval=0.2)
    watch.start()
    # 4 MiB a step, up to 80 MiB, into the image's own filesystem; the upper dir joins once the container exists.
    run(container, "for i in $(seq 20); do head -c 4194304 /dev/urandom > /var/tmp/part$i; sleep 0.1; done; sleep 600")
    watch.add_path(await disk.upper_dir(engine, container))
    await asyncio.wait_for(done.wait(), HANG_GUARD)
    assert watch.exceeded == fired[0] and fired[0] > 20 * MIB
    while watch.running:
        await asyncio.sleep(0.05)
    # Stopped after firing: more writing, more time, no second call.
    write(scratch / "more", 8 * MIB)
    await asyncio.sleep(0.6)
    assert fired == [watch.exceeded]


async def test_the_watch_stays_quiet_under_its_limit_and_close_cancels_it(tmp_path: Path) -> None:
    fired: list[int] = []
    write(tmp_path / "data", 2 * MIB)
    watch = disk.DiskWatch([tmp_path], 20 * MIB, fired.append, interval=0.05)
    watch.start()
    while watch.used is None:
        await asyncio.sleep(0.01)
    assert watch.running and 2 * MIB <= watch.used < 3 * MIB
    watch.close()
    while watch.running:
        await asyncio.sleep(0.01)
    # Over the limit once closed: never reported.
    write(tmp_path / "big", 30 * MIB)
    await asyncio.sleep(0.3)
    assert fired == [] and watch.exceeded is None
    watch.start()  # a closed watch does not start again
    assert not watch.running


def test_a_watch_refuses_a_negative_limit_or_interval(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        disk.DiskWatch([tmp_path], -1, print)
    with pytest.raises(ValueError):
        disk.DiskWatch([tmp_path], MIB, print, interval=0)
