"""User archives unpacked in a sandbox of their own: the same result as in the agent, the same refusals, and a
child that can write nothing but its destination, see no credentials and reach no network (ADR 0031)."""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from nodus.agent import archives, runtime
from nodus.agent.bubblewrap import BubblewrapRuntime
from nodus.agent.unpacking import Unpacker


@pytest.fixture
def credentials() -> Iterator[Path]:
    """The agent's credentials, outside /tmp (which the child gets a private one of anyway)."""
    directory = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="nodus-agent-"))
    (directory / "kubeconfig").write_text("the node's credentials")
    yield directory
    shutil.rmtree(directory)


@pytest.fixture
def confined(sandbox: runtime.Runtime, credentials: Path) -> Unpacker:
    assert isinstance(sandbox, BubblewrapRuntime)
    return Unpacker.for_runtime(sandbox, [str(credentials)])


def tar_zst(*files: tuple[str, bytes], link: tuple[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo(link[0])
            info.type, info.linkname = tarfile.SYMTYPE, link[1]
            tar.addfile(info)
    return zstandard.ZstdCompressor().compress(buffer.getvalue())


async def test_the_sandbox_unpacks_what_the_agent_would(confined: Unpacker, tmp_path: Path) -> None:
    assert confined.bwrap is not None
    (tmp_path / "blob").write_bytes(tar_zst(("a.txt", b"alpha"), ("sub/b.bin", b"\x00" * 70000)))
    await confined.unpack(tmp_path / "blob", tmp_path / "inputs" / "data", archives.TAR_ZSTD)
    assert (tmp_path / "inputs" / "data" / "a.txt").read_bytes() == b"alpha"
    assert (tmp_path / "inputs" / "data" / "sub" / "b.bin").read_bytes() == b"\x00" * 70000


async def test_the_sandbox_refuses_what_the_agent_would(confined: Unpacker, tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(tar_zst(("a.txt", b"alpha"), link=("passwd", "/etc/passwd")))
    with pytest.raises(archives.ArchiveError, match=r"unsafe archive member 'passwd': is a symbolic link"):
        await confined.unpack(tmp_path / "blob", tmp_path / "out", archives.TAR_ZSTD)
    (tmp_path / "garbage").write_bytes(b"not zstandard" * 10)
    with pytest.raises(archives.ArchiveError, match="not a valid zstandard stream"):
        await confined.unpack(tmp_path / "garbage", tmp_path / "out2", archives.TAR_ZSTD)


def test_the_unpacking_child_writes_only_its_destination_and_sees_no_credentials(
    confined: Unpacker, credentials: Path, tmp_path: Path
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    destination = tmp_path / "inputs" / "data"
    destination.mkdir(parents=True)
    probe = f"""
import os, socket
def attempt(what, action):
    try:
        action()
        print(what, "allowed")
    except OSError as error:
        print(what, "refused", error.errno)
attempt("write-outside", lambda: open({str(tmp_path / "escaped")!r}, "w").write("x"))
attempt("write-root", lambda: open("/escaped", "w").write("x"))
attempt("read-credentials", lambda: open({str(credentials / "kubeconfig")!r}).read())
attempt("connect", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
attempt("write-destination", lambda: open({str(destination / "ok")!r}, "w").write("x"))
"""
    argv = confined.command(destination, archives.TAR_ZSTD)
    argv = [*argv[: argv.index("-I") + 1], "-c", probe]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env={})
    listener.close()
    said = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert said["write-destination"] == "allowed", result.stderr
    # /tmp is the child's own tmpfs: a write there lands nowhere on the host.
    assert not (tmp_path / "escaped").exists()
    assert said["write-root"].startswith("refused")
    assert said["read-credentials"].startswith("refused")
    assert said["connect"].startswith("refused")
    assert (destination / "ok").read_text() == "x"
