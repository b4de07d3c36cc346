"""Builders and readers of checkpoint roots on disk, shared by the checkpoint tests."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from nodus.agent.manifests import CHUNK_SIZE, Manifest
from nodus.agent.snapshots import Mirror

STATE = "/nodus/state"
CREATED = "2025-01-02T03:04:05Z"
Tree = dict[str, tuple[str, int, bytes | str]]


def checkpoint(mirror: Mirror, seq: int = 1) -> Manifest:
    staged = mirror.stage(1 << 40)
    return mirror.manifest(staged, seq, "Snapshot", CREATED, {"job": "train", "index": "0"})


def chunks_of(mirror: Mirror) -> Callable[[str], bytes]:
    return lambda digest: mirror.chunk_reader(digest).read()


def tree(root: Path) -> Tree:
    """Every entry from ``root`` down: type, permission bits, and bytes or link target."""
    found: Tree = {}

    def visit(path: Path, name: str) -> None:
        status = os.lstat(path)
        if stat.S_ISLNK(status.st_mode):
            found[name] = ("symlink", 0, os.readlink(path))
        elif stat.S_ISDIR(status.st_mode):
            found[name] = ("dir", stat.S_IMODE(status.st_mode), b"")
            for child in sorted(os.listdir(path)):
                visit(path / child, f"{name}/{child}")
        else:
            found[name] = ("file", stat.S_IMODE(status.st_mode), path.read_bytes())

    visit(root, ".")
    return found


def make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "empty.bin").write_bytes(b"")
    (root / "model.pt").write_bytes(os.urandom(CHUNK_SIZE + 5))
    (root / "sub" / "deeper" / "notes.txt").write_text("step 100\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o750)
    (root / "sub").chmod(0o711)
    (root / "latest").symlink_to("sub/deeper/notes.txt")
    (root / "dangling").symlink_to("/nowhere/at/all")
