"""Reaching the program's files from a trusted directory: a planted link is refused at every component, never
followed, and files the agent writes are created fresh and swapped in whole (ADR 0031)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from nodus.agent import hostfiles
from nodus.agent.hostfiles import Location, UnsafePath


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The trusted directory (as ``/nodus/outputs``), with ``a/b/file.txt`` in it."""
    root = tmp_path / "outputs"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "file.txt").write_text("program output")
    return root


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A host file the program must never get the agent to read or write, beside a host directory."""
    (tmp_path / "host-dir").mkdir()
    (tmp_path / "host-dir" / "file.txt").write_text("host secret")
    path = tmp_path / "host-secret"
    path.write_text("host secret")
    return path


def at(base: Path, *parts: str) -> Location:
    return Location(base, parts, "/nodus/outputs")


@pytest.mark.parametrize(
    ("link", "parts"),
    [
        pytest.param("a", ("a", "b", "file.txt"), id="first-component"),
        pytest.param("a/b", ("a", "b", "file.txt"), id="middle-component"),
        pytest.param("a/b/file.txt", ("a", "b", "file.txt"), id="last-component"),
    ],
)
def test_a_link_at_any_component_is_refused_and_named_as_the_program_sees_it(
    base: Path, canary: Path, link: str, parts: tuple[str, ...]
) -> None:
    planted = base / link
    target = canary if link.endswith(".txt") else canary.parent / "host-dir"
    if planted.is_dir():
        os.rename(planted, planted.with_name("moved"))
    else:
        planted.unlink()
    planted.symlink_to(target)
    shown = f"/nodus/outputs/{link}"
    with pytest.raises(UnsafePath, match=f"^{shown} is a symbolic link"):
        os.close(hostfiles.open_file(at(base, *parts)))
    with pytest.raises(UnsafePath, match=f"^{shown} is a symbolic link"):
        hostfiles.read_file(at(base, *parts), 100)
    if link.endswith(".txt"):
        hostfiles.write_file(at(base, *parts), b"agent's")  # replaces the link itself
        assert not planted.is_symlink()
    else:
        with pytest.raises(UnsafePath, match=f"^{shown} is a symbolic link"):
            hostfiles.write_file(at(base, *parts), b"agent's")
    assert canary.read_text() == "host secret"
    assert sorted(p.name for p in (canary.parent / "host-dir").iterdir()) == ["file.txt"]


def test_special_files_are_refused_without_blocking(base: Path) -> None:
    os.mkfifo(base / "pipe")
    with pytest.raises(UnsafePath, match="/nodus/outputs/pipe is not a regular file or directory"):
        hostfiles.open_entry(at(base, "pipe"))  # a blocking open of a fifo would hang here
    with pytest.raises(UnsafePath, match="is a directory, not a regular file"):
        hostfiles.open_file(at(base, "a"))
    with pytest.raises(UnsafePath, match=r"/nodus/outputs/a/b/file\.txt is not a directory"):
        hostfiles.open_directory(at(base, "a", "b", "file.txt", "c"))


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "nul\0"])
def test_names_that_are_not_one_component_are_refused(base: Path, name: str) -> None:
    with pytest.raises(UnsafePath, match="is not a name"):
        at(base, "a", name)


def test_missing_is_file_not_found_and_names_the_program_path(base: Path) -> None:
    with pytest.raises(FileNotFoundError, match="/nodus/outputs/nope"):
        hostfiles.open_entry(at(base, "nope", "x"))
    assert hostfiles.read_file(at(base, "a", "missing"), 10) is None
    assert hostfiles.remove(at(base, "a", "missing")) is False


def test_a_directory_swapped_for_a_link_mid_walk_is_refused(base: Path, canary: Path) -> None:
    (base / "z").mkdir()
    fd = hostfiles.open_directory(at(base))
    try:
        walk = hostfiles.walk(fd, "/nodus/outputs")
        assert next(walk).relative == "a"
        # The walk has looked at "a" and will open it next: the program swaps it for a link to a host directory.
        os.rename(base / "a", base / "moved")
        (base / "a").symlink_to(canary.parent / "host-dir")
        with pytest.raises(UnsafePath, match=r"^/nodus/outputs/a is a symbolic link"):
            next(walk)
    finally:
        os.close(fd)


def test_walk_lists_links_as_entries_and_never_descends_into_them(base: Path, canary: Path) -> None:
    (base / "a" / "up").symlink_to(canary.parent)
    fd = hostfiles.open_directory(at(base))
    try:
        found = {e.relative: stat.S_IFMT(e.status.st_mode) for e in hostfiles.walk(fd, "/nodus/outputs")}
    finally:
        os.close(fd)
    assert found == {
        "a": stat.S_IFDIR,
        "a/b": stat.S_IFDIR,
        "a/b/file.txt": stat.S_IFREG,
        "a/up": stat.S_IFLNK,
    }


def test_a_file_swapped_between_look_and_open_is_refused(base: Path, canary: Path) -> None:
    directory = hostfiles.open_directory(at(base, "a", "b"))
    try:
        real_stat = os.stat

        def swap_after_look(*args: object, **kwargs: object) -> os.stat_result:
            status = real_stat(*args, **kwargs)  # type: ignore[arg-type]
            os.unlink("file.txt", dir_fd=directory)
            os.symlink(canary, "file.txt", dir_fd=directory)
            return status

        os.stat = swap_after_look  # type: ignore[assignment]
        try:
            with pytest.raises(UnsafePath, match=r"file\.txt is a symbolic link"):
                hostfiles.open_entry_at(directory, "file.txt", "/nodus/outputs/a/b/file.txt")
        finally:
            os.stat = real_stat
    finally:
        os.close(directory)


def test_write_replaces_a_planted_link_and_never_writes_its_target(base: Path, canary: Path) -> None:
    (base / "request").symlink_to(canary)
    hostfiles.write_file(at(base, "request"), b'{"seq": 1}', 0o400)
    assert canary.read_text() == "host secret"
    assert not (base / "request").is_symlink()
    assert (base / "request").read_bytes() == b'{"seq": 1}'
    assert stat.S_IMODE((base / "request").stat().st_mode) == 0o400
    assert [p.name for p in base.iterdir() if p.name.endswith(".nodus-tmp")] == []


def test_exclusive_creation_refuses_a_planted_link(base: Path, canary: Path) -> None:
    (base / "fresh").symlink_to(canary)
    directory = hostfiles.open_directory(at(base))
    try:
        with pytest.raises(FileExistsError):
            hostfiles.create_at(directory, "fresh")
    finally:
        os.close(directory)
    assert canary.read_text() == "host secret"


def test_write_onto_a_directory_is_refused(base: Path) -> None:
    with pytest.raises(UnsafePath, match="/nodus/outputs/a is a directory"):
        hostfiles.write_file(at(base, "a"), b"x")
    assert [p.name for p in base.iterdir()] == ["a"]


def test_remove_takes_the_link_not_its_target(base: Path, canary: Path) -> None:
    (base / "ack").symlink_to(canary)
    assert hostfiles.remove(at(base, "ack")) is True
    assert canary.exists() and not (base / "ack").is_symlink()


def test_a_reader_sees_the_old_file_or_the_new_one_never_a_part(base: Path) -> None:
    old, new = b"o" * 1_000_000, b"n" * 1_000_000
    hostfiles.write_file(at(base, "state"), old)
    seen: set[bytes] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add((base / "state").read_bytes()[:1] + bytes([len((base / "state").read_bytes()) % 256]))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(20):
            hostfiles.write_file(at(base, "state"), new)
            hostfiles.write_file(at(base, "state"), old)
    finally:
        stop.set()
        reader.join()
    assert seen <= {b"o" + bytes([1_000_000 % 256]), b"n" + bytes([1_000_000 % 256])}


def test_directories_are_made_one_component_at_a_time(base: Path, canary: Path) -> None:
    os.close(hostfiles.open_directory(at(base, "x", "y", "z"), create=True, mode=0o700))
    assert (base / "x" / "y" / "z").is_dir()
    (base / "x" / "link").symlink_to(canary.parent / "host-dir")
    with pytest.raises(UnsafePath, match="/nodus/outputs/x/link is a symbolic link"):
        hostfiles.open_directory(at(base, "x", "link", "new"), create=True)
    assert sorted(p.name for p in (canary.parent / "host-dir").iterdir()) == ["file.txt"]
