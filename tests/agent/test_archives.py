"""Directory archives: round trips, determinism, streaming, and refusing unsafe archives."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest
import zstandard

from nodus.agent import archives


def make_tree(root: Path) -> Path:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(3 * archives.CHUNK + 17))
    (root / "sub" / "deeper" / "c.txt").write_text("gamma\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("sub/deeper/c.txt")
    return root


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry under root: kind and content (or link target), plus the executable bit."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[relative] = ("link", os.readlink(path))
        elif path.is_dir():
            found[relative] = ("dir", "")
        else:
            found[relative] = (
                "file" + ("+x" if os.access(path, os.X_OK) else ""),
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return found


def test_round_trip_keeps_files_directories_links_and_modes(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    sha, size = archives.pack_to_file(tree, tmp_path / "tree.tar.zst")
    assert (sha, size) == archives.digest_file(tmp_path / "tree.tar.zst")
    archives.unpack(tmp_path / "tree.tar.zst", tmp_path / "out", archives.TAR_ZSTD)
    assert snapshot(tmp_path / "out") == snapshot(tree)


def test_packing_is_deterministic_and_sorted(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    first = b"".join(archives.pack(tree))
    assert first == b"".join(archives.pack(tree))
    with tarfile.open(fileobj=io.BytesIO(zstandard.ZstdDecompressor().decompressobj().decompress(first))) as tar:
        names = tar.getnames()
        assert all(member.uid == 0 and member.uname == "" for member in tar.getmembers())
    assert names == ["a.txt", "empty", "link", "run.sh", "sub", "sub/b.bin", "sub/deeper", "sub/deeper/c.txt"]


def test_pack_streams_in_bounded_chunks(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "big").write_bytes(os.urandom(8 * archives.CHUNK))  # incompressible: output ~ input
    sizes = [len(chunk) for chunk in archives.pack(tree)]
    assert len(sizes) > 4
    assert max(sizes) <= 2 * archives.CHUNK


async def test_pack_async_yields_the_same_bytes(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    chunks = [chunk async for chunk in archives.pack_async(tree)]
    assert b"".join(chunks) == b"".join(archives.pack(tree))


def test_plain_tar_from_a_file_object(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = b"hello"
        info = tarfile.TarInfo("dir/hello.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    archives.unpack(buffer, tmp_path / "out", "application/x-tar")
    assert (tmp_path / "out" / "dir" / "hello.txt").read_bytes() == b"hello"


def test_other_media_types_are_written_as_one_file(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"\x00weights" * 1000)
    archives.unpack(tmp_path / "model.bin", tmp_path / "copy.bin", "application/octet-stream")
    assert (tmp_path / "copy.bin").read_bytes() == b"\x00weights" * 1000


def _tar_with(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        member.size = len(data) if member.isfile() else 0
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return zstandard.ZstdCompressor().compress(buffer.getvalue())


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


@pytest.mark.parametrize(
    "member",
    [
        pytest.param(_member("/etc/evil"), id="absolute-path"),
        pytest.param(_member("../evil"), id="dot-dot"),
        pytest.param(_member("a/../../evil"), id="dot-dot-inside"),
        pytest.param(_member("link", tarfile.SYMTYPE, "/etc/passwd"), id="absolute-symlink"),
        pytest.param(_member("link", tarfile.SYMTYPE, "../../etc/passwd"), id="symlink-outside"),
        pytest.param(_member("hard", tarfile.LNKTYPE, "../outside"), id="hardlink-outside"),
        pytest.param(_member("dev", tarfile.CHRTYPE), id="device"),
    ],
)
def test_unsafe_members_are_refused(tmp_path: Path, member: tarfile.TarInfo) -> None:
    blob = tmp_path / "evil.tar.zst"
    blob.write_bytes(_tar_with(member, b"x"))
    with pytest.raises(archives.ArchiveError, match="unsafe archive member"):
        archives.unpack(blob, tmp_path / "out", archives.TAR_ZSTD)
    assert not (tmp_path / "evil").exists()
    assert not (tmp_path / "outside").exists()


def test_garbage_is_an_archive_error(tmp_path: Path) -> None:
    blob = tmp_path / "garbage"
    blob.write_bytes(b"this is not zstandard" * 10)
    with pytest.raises(archives.ArchiveError):
        archives.unpack(blob, tmp_path / "out", archives.TAR_ZSTD)
