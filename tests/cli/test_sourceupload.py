"""``nodus run --source DIR``'s archive: what git would take, links kept as links, and its digest."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest
import zstandard

from nodus.cli.sourceupload import SourceError, leaving_links, pack, selected, upload


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def names(root: Path) -> set[str]:
    return {name for _, name in selected(root)}


def archived(root: Path) -> dict[str, tarfile.TarInfo]:
    buffer = io.BytesIO()
    packed = pack(root, buffer)
    data = buffer.getvalue()
    assert packed.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert packed.size == len(data)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        return {member.name: member for member in tar}


def test_a_tree_without_gitignore_goes_whole_but_git(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": "print(1)\n", "pkg/mod.py": "", ".git/HEAD": "ref\n", "pkg/.git/x": ""})
    assert names(root) == {"train.py", "pkg", "pkg/mod.py"}


@pytest.mark.parametrize(
    ("gitignore", "kept", "gone"),
    [
        pytest.param("*.log\n", {"a.py"}, {"run.log", "sub/deep.log"}, id="glob-at-every-depth"),
        pytest.param("*.log\n!keep.log\n", {"keep.log"}, {"run.log"}, id="negation"),
        pytest.param("/top.txt\n", {"sub/top.txt"}, {"top.txt"}, id="anchored"),
        pytest.param("build/\n", {"build.py"}, {"build", "build/out.bin", "sub/build"}, id="directory-only"),
        pytest.param("sub/**/*.bin\n", {"a.py"}, {"sub/build/x.bin"}, id="double-star"),
        pytest.param("# a comment\n\n", {"run.log", "top.txt"}, set(), id="comments-and-blanks"),
    ],
)
def test_gitignore_rules(tmp_path: Path, gitignore: str, kept: set[str], gone: set[str]) -> None:
    root = tree(
        tmp_path,
        {
            ".gitignore": gitignore,
            "a.py": "",
            "run.log": "",
            "keep.log": "",
            "top.txt": "",
            "build.py": "",
            "build/out.bin": "",
            "sub/top.txt": "",
            "sub/deep.log": "",
            "sub/build/x.bin": "",
        },
    )
    found = names(root)
    assert kept <= found, found
    assert not gone & found, found
    assert ".gitignore" in found


def test_nested_gitignore_files_apply_below_their_directory_and_override_outer_ones(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            ".gitignore": "*.log\nsecret.txt\n",
            "run.log": "",
            "logs/.gitignore": "!*.log\nlocal.txt\n",
            "logs/train.log": "",
            "logs/local.txt": "",
            "logs/secret.txt": "",
            "other/local.txt": "",
            "other/x.log": "",
        },
    )
    found = names(root)
    assert "logs/train.log" in found, "the inner ! re-includes what the outer file ignores"
    assert "run.log" not in found and "other/x.log" not in found
    assert "logs/local.txt" not in found, "the inner file's own rule"
    assert "other/local.txt" in found, "the inner file says nothing about other directories"
    assert "logs/secret.txt" not in found, "the outer rule still applies where the inner one is silent"


def test_an_ignored_directory_cannot_be_re_included_into(tmp_path: Path) -> None:
    root = tree(tmp_path, {".gitignore": "data/\n!data/keep.txt\n", "data/keep.txt": "", "data/big.bin": ""})
    assert names(root) == {".gitignore"}


def test_a_symlink_out_of_the_directory_is_stored_as_a_link_and_not_followed(tmp_path: Path) -> None:
    outside = tree(tmp_path / "outside", {"secret.txt": "do not upload\n", "dir/inner.txt": "nor this\n"})
    root = tree(tmp_path / "src", {"train.py": "print(1)\n"})
    (root / "to-secret").symlink_to(outside / "secret.txt")
    (root / "to-dir").symlink_to(outside / "dir")
    (root / "relative").symlink_to("../outside/secret.txt")
    members = archived(root)
    assert set(members) == {"train.py", "to-secret", "to-dir", "relative"}
    assert members["to-secret"].issym() and members["to-secret"].linkname == str(outside / "secret.txt")
    assert members["to-dir"].issym(), "a link to a directory is not descended into"
    assert members["relative"].issym() and members["relative"].linkname == "../outside/secret.txt"
    assert not any("inner" in name for name in members)


def test_the_archive_holds_the_files_contents_and_modes(tmp_path: Path) -> None:
    root = tree(tmp_path, {"run.sh": "#!/bin/sh\necho hi\n", "pkg/data.txt": "x" * 5000, ".gitignore": "*.tmp\n"})
    (root / "run.sh").chmod(0o755)
    (root / "scratch.tmp").write_text("")
    buffer = io.BytesIO()
    packed = pack(root, buffer)
    assert (packed.files, packed.ignored) == (3, 1)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(buffer.getvalue()))
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        contents = {}
        for member in tar:
            if member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None
                contents[member.name] = (handle.read(), member.mode & 0o777)
    assert contents["run.sh"] == (b"#!/bin/sh\necho hi\n", 0o755)
    assert contents["pkg/data.txt"][0] == b"x" * 5000


def test_the_same_tree_packs_to_the_same_digest(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": "1", "b/c.py": "2"})
    first, second = io.BytesIO(), io.BytesIO()
    assert pack(root, first).digest == pack(root, second).digest


def test_fifos_are_not_source(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.py": ""})
    os.mkfifo(root / "pipe")
    assert names(root) == {"a.py"}


def test_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(SourceError, match=r"not a directory"):
        pack(tmp_path / "file", io.BytesIO())


def test_links_that_leave_the_tree_are_named_before_anything_is_sent(tmp_path: Path) -> None:
    outside = tree(tmp_path / "outside", {"secret.txt": ""})
    root = tree(tmp_path / "src", {"a.py": "", "pkg/b.py": "", ".gitignore": "ignored-link\n"})
    (root / "abs").symlink_to(outside / "secret.txt")
    (root / "pkg" / "up").symlink_to("../../outside/secret.txt")
    (root / "pkg" / "sibling").symlink_to("../a.py")  # stays inside: fine
    (root / "inside").symlink_to("pkg/b.py")  # fine
    (root / "ignored-link").symlink_to("/etc/passwd")  # not archived: fine
    assert leaving_links(root) == [("abs", str(outside / "secret.txt")), ("pkg/up", "../../outside/secret.txt")]
    with pytest.raises(SourceError, match=r"links that leave it \(abs -> .*secret.txt, pkg/up -> \.\./\.\./outside"):
        asyncio.run(upload(None, "demo", root))  # refused before the client is used
