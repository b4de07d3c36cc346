"""Directory archives: round trips, determinism, streaming, packing without following links, and refusing
unsafe or oversized archives member by member (ADR 0031)."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
import zstandard

from nodus.agent import archives


def make_tree(root: Path, *, link: bool = True) -> Path:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(3 * archives.CHUNK + 17))
    (root / "sub" / "deeper" / "c.txt").write_text("gamma\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    if link:
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


def test_round_trip_keeps_files_directories_and_modes(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree", link=False)
    sha, size = archives.pack_to_file(tree, tmp_path / "tree.tar.zst")
    assert (sha, size) == archives.digest_file(tmp_path / "tree.tar.zst")
    archives.unpack(tmp_path / "tree.tar.zst", tmp_path / "out", archives.TAR_ZSTD)
    assert snapshot(tmp_path / "out") == snapshot(tree)


def test_a_packed_link_stays_a_link_and_is_refused_when_unpacked(tmp_path: Path) -> None:
    outside = tmp_path / "host-secret"
    outside.write_text("never packed")
    tree = make_tree(tmp_path / "tree")
    (tree / "leak").symlink_to(outside)
    packed = b"".join(archives.pack(tree))
    assert b"never packed" not in zstandard.ZstdDecompressor().decompressobj().decompress(packed)
    (tmp_path / "tree.tar.zst").write_bytes(packed)
    with pytest.raises(archives.ArchiveError, match=r"'leak'.* symbolic link to .*host-secret"):
        archives.unpack(tmp_path / "tree.tar.zst", tmp_path / "out", archives.TAR_ZSTD)


def test_links_that_stay_inside_round_trip(tmp_path: Path) -> None:
    """A Hugging Face cache in a Volume: snapshots link to blobs with ../.. targets."""
    tree = make_tree(tmp_path / "tree")  # with its link to sub/deeper/c.txt
    blobs = tree / "hub" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "ab12").write_text("weights")
    snapshot_dir = tree / "hub" / "snapshots" / "main"
    snapshot_dir.mkdir(parents=True)
    (snapshot_dir / "model.bin").symlink_to("../../blobs/ab12")
    (tree / "hub" / "latest").symlink_to("snapshots/main")
    archives.pack_to_file(tree, tmp_path / "tree.tar.zst")
    archives.unpack(tmp_path / "tree.tar.zst", tmp_path / "out", archives.TAR_ZSTD)
    assert snapshot(tmp_path / "out") == snapshot(tree)
    assert (tmp_path / "out" / "hub" / "latest" / "model.bin").read_text() == "weights"


@pytest.mark.parametrize(
    ("name", "target", "kept"),
    [
        pytest.param("a/link", "b", True, id="sibling"),
        pytest.param("a/b/link", "../../c/d", True, id="climbs-to-the-root"),
        pytest.param("a/link", "../../etc/passwd", False, id="climbs-out"),
        pytest.param("link", "..", False, id="parent-of-the-root"),
        pytest.param("a/link", "/etc", False, id="absolute"),
        pytest.param("a/link", "b/../..", False, id="dot-dot-after-a-name"),
        pytest.param("a/link", "", False, id="empty"),
    ],
)
def test_which_links_are_contained(name: str, target: str, kept: bool) -> None:
    assert archives.contained_link(tuple(name.split("/")), target) is kept


def test_contained_links_cannot_chain_out(tmp_path: Path) -> None:
    """sub/up -> .. is contained; x/z -> ../sub/up/../.. would climb out through it, and is refused."""
    blob = _tar_of(
        _directory("sub"),
        (_member("sub/up", tarfile.SYMTYPE, ".."), b""),
        _directory("x"),
        (_member("x/z", tarfile.SYMTYPE, "../sub/up/../.."), b""),
    )
    with pytest.raises(archives.ArchiveError, match=r"'x/z': is a symbolic link .* leaves the archive"):
        _unpack(tmp_path, blob)


def test_a_file_is_never_written_through_a_contained_link(tmp_path: Path) -> None:
    blob = _tar_of(_directory("real"), (_member("alias", tarfile.SYMTYPE, "real"), b""), _file("alias/planted"))
    with pytest.raises(archives.ArchiveError, match=r"'alias/planted': collides"):
        _unpack(tmp_path, blob)
    assert not (tmp_path / "out" / "real" / "planted").exists()


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


def _tar_of(*members: tuple[tarfile.TarInfo, bytes], compress: bool = True) -> bytes:
    """A tar stream of ``members`` (headers as given, then their data), zstandard-compressed by default."""
    buffer = io.BytesIO()
    for info, data in members:
        buffer.write(info.tobuf(format=tarfile.PAX_FORMAT))
        buffer.write(data + bytes(-len(data) % tarfile.BLOCKSIZE))
    buffer.write(bytes(2 * tarfile.BLOCKSIZE))
    raw = buffer.getvalue()
    return zstandard.ZstdCompressor().compress(raw) if compress else raw


def _file(name: str, data: bytes = b"x", mode: int = 0o644, size: int | None = None) -> tuple[tarfile.TarInfo, bytes]:
    info = _member(name)
    info.size, info.mode = len(data) if size is None else size, mode
    return info, data


def _directory(name: str, mode: int = 0o755) -> tuple[tarfile.TarInfo, bytes]:
    info = _member(name, tarfile.DIRTYPE)
    info.mode = mode
    return info, b""


def _unpack(tmp_path: Path, blob: bytes, limits: archives.Limits | None = None) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "blob").write_bytes(blob)
    out = tmp_path / "out"
    archives.unpack(tmp_path / "blob", out, archives.TAR_ZSTD, limits)
    return out


@pytest.mark.parametrize(
    ("members", "refused"),
    [
        pytest.param(
            [(_member("escape", tarfile.SYMTYPE, "/tmp"), b""), _file("escape/planted")],
            "'escape': is a symbolic link",
            id="file-through-symlink",
        ),
        pytest.param(
            [(_member("passwd", tarfile.LNKTYPE, "/etc/passwd"), b"")],
            "'passwd': is a hard link to '/etc/passwd'",
            id="hardlink-to-etc-passwd",
        ),
        pytest.param([(_member("pipe", tarfile.FIFOTYPE), b"")], "'pipe': is a device, fifo", id="fifo"),
        pytest.param([(_member("disk", tarfile.BLKTYPE), b"")], "'disk': is a device", id="block-device"),
        pytest.param(
            [(_member("a", tarfile.REGTYPE, "/etc/shadow"), b"")], "names a link target", id="file-with-linkname"
        ),
        pytest.param([_file("a"), _file("a")], "'a': collides with an earlier member", id="same-name-twice"),
        pytest.param([_directory("a"), _file("a")], "'a': collides", id="file-over-directory"),
        pytest.param([_file("a"), _file("a/b")], r"'a/b': collides .*a is not a directory", id="file-as-directory"),
        pytest.param([_file("a"), _directory("a")], "'a': collides", id="directory-over-file"),
        pytest.param([_file("./")], "is a file where the destination directory is", id="file-as-destination"),
    ],
)
def test_crafted_members_are_refused_and_nothing_is_written_outside(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]], refused: str
) -> None:
    with pytest.raises(archives.ArchiveError, match=refused):
        _unpack(tmp_path, _tar_of(*members))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob", "out"]
    assert not (Path("/tmp") / "planted").exists()


def test_a_link_already_in_the_destination_is_never_followed(tmp_path: Path) -> None:
    # An agent restarted mid-attempt unpacks again where the program may have left a link.
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "data").symlink_to(outside)
    with pytest.raises(archives.ArchiveError, match=r"'data/x': collides .*data is a symbolic link"):
        _unpack(tmp_path, _tar_of(_file("data/x")))
    assert list(outside.iterdir()) == []


def test_names_fold_dot_and_empty_components_and_modes_lose_special_bits(tmp_path: Path) -> None:
    out = _unpack(
        tmp_path,
        _tar_of(
            _directory("./"), _directory("./bin/", 0o7777), _file("./bin//tool", b"#!", 0o6777), _file("ro", mode=0o400)
        ),
    )
    assert (out / "bin" / "tool").read_bytes() == b"#!"
    assert stat.S_IMODE((out / "bin").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "bin" / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "ro").stat().st_mode) == 0o600


def test_a_huge_declared_size_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(archives.ArchiveError, match=r"'huge' \(2199023255552 bytes\) would take the archive past"):
        _unpack(tmp_path, _tar_of(_file("huge", b"tiny", size=2 << 40)))
    assert list((tmp_path / "out").iterdir()) == []


def test_bytes_and_entries_are_bounded(tmp_path: Path) -> None:
    limits = archives.Limits(max_bytes=10, max_entries=3)
    many = [_file(f"f{i}", b"") for i in range(4)]
    with pytest.raises(archives.ArchiveError, match="more than 3 members"):
        _unpack(tmp_path / "many", _tar_of(*many), limits)
    with pytest.raises(archives.ArchiveError, match="'b' \\(6 bytes\\) would take the archive past 10 bytes"):
        _unpack(tmp_path / "big", _tar_of(_file("a", b"123456"), _file("b", b"123456")), limits)
    (tmp_path / "one").write_bytes(b"x" * 11)
    with pytest.raises(archives.ArchiveError, match="larger than 10 bytes"):
        archives.unpack(tmp_path / "one", tmp_path / "copy", "application/octet-stream", limits)
    assert _unpack(tmp_path / "fits", _tar_of(*many[:3]), limits).is_dir()


def test_a_single_file_never_replaces_an_existing_name(tmp_path: Path) -> None:
    (tmp_path / "data").write_bytes(b"new")
    (tmp_path / "target").write_text("host file")
    (tmp_path / "input").symlink_to(tmp_path / "target")
    with pytest.raises(archives.ArchiveError, match="already exists"):
        archives.unpack(tmp_path / "data", tmp_path / "input", "application/octet-stream")
    assert (tmp_path / "target").read_text() == "host file"
