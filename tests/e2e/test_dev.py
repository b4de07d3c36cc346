"""`nodus dev`: one command gives a working system, a kubeconfig, and keeps objects across restarts."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from nodus.storage import database
from tests.support import kubectl
from tests.support.cluster import free_port
from tests.support.objects import job

pytestmark = pytest.mark.e2e


def _start(data_dir: Path, port: int, database_url: str | None) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "NODUS_DATABASE_URL"}
    args = [sys.executable, "-m", "nodus.cli.main", "dev", "--data-dir", str(data_dir), "--port", str(port)]
    if database_url:
        args += ["--database-url", database_url]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "export KUBECONFIG=" in line:
            return process, line
        if len(lines) > 200:
            break
    process.kill()
    raise AssertionError("nodus dev did not announce itself:\n" + "".join(lines))


def _stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=30)
    finally:
        if process.stdout:
            process.stdout.close()
    return code


EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "hello.yaml"


def _phases_of_the_example(kubectl_binary: Path, config: Path) -> list[str]:
    """Apply the README's example and watch it with kubectl until it ends: the phases it went through."""
    watcher = subprocess.Popen(
        [
            str(kubectl_binary),
            "--kubeconfig",
            str(config),
            "get",
            "jobs",
            "--field-selector",
            "metadata.name=hello",
            "--watch",
            "--output-watch-events",
            "-o",
            "jsonpath={.object.status.phase}{'\\n'}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        kubectl.run(kubectl_binary, config, "apply", "-f", str(EXAMPLE))
        seen: list[str] = []
        assert watcher.stdout is not None
        for line in watcher.stdout:
            phase = line.strip()
            if phase and (not seen or seen[-1] != phase):
                seen.append(phase)
            if phase in ("Succeeded", "Failed", "Cancelled"):
                break
        return [p for p in seen if p != "Pending"]
    finally:
        watcher.kill()
        watcher.wait()
        if watcher.stdout is not None:
            watcher.stdout.close()


def _exercise(data_dir: Path, port: int, url: str | None, kubectl_binary: Path) -> None:
    process, announcement = _start(data_dir, port, url)
    try:
        config = data_dir.resolve() / "kubeconfig"
        assert f"https://127.0.0.1:{port}" in announcement and f"export KUBECONFIG={config}" in announcement
        projects = kubectl.run(kubectl_binary, config, "get", "projects").stdout
        assert "default" in projects
        kubectl.run(kubectl_binary, config, "apply", "-f", "-", stdin=yaml.safe_dump(job("survivor")))
        assert _phases_of_the_example(kubectl_binary, config) == ["Queued", "Provisioning", "Running", "Succeeded"]
    finally:
        assert _stop(process) == 0
    process, _ = _start(data_dir, port, url)
    try:
        out = kubectl.run(kubectl_binary, data_dir.resolve() / "kubeconfig", "get", "jobs").stdout
        assert "survivor" in out, "objects must survive a restart on the same data dir"
        credits = kubectl.run(
            kubectl_binary, config, "get", "project", "default", "-o", "jsonpath={.status.credits.balanceUSD}"
        ).stdout
        # 100 USD granted once (not again at the restart), less what the Job was charged.
        assert Decimal(90) < Decimal(credits) <= Decimal(100), credits
    finally:
        assert _stop(process) == 0


@pytest.mark.slow  # a whole nodus dev (registry, image push, podman hosts), about 30 s (slow tier)
def test_dev_with_a_database_url(database_server: str, tmp_path: Path, kubectl_binary: Path) -> None:
    url = asyncio.run(database.create_database(database_server))
    try:
        _exercise(tmp_path / "data", free_port(), url, kubectl_binary)
    finally:
        asyncio.run(database.drop_database(url))


@pytest.mark.slow  # a whole nodus dev; the walkthrough test starts one in the default tier (slow tier)
def test_dev_with_the_embedded_database(tmp_path: Path, kubectl_binary: Path) -> None:
    data_dir = Path(f"/tmp/nodus-dev-{os.getpid()}")  # short: PostgreSQL's socket path is limited
    try:
        _exercise(data_dir, free_port(), None, kubectl_binary)
        leftovers = subprocess.run(
            ["pgrep", "-f", str(data_dir / "postgres")], check=False, capture_output=True, text=True
        )
        assert leftovers.stdout.strip() == "", "the embedded PostgreSQL must stop with nodus dev"
    finally:
        subprocess.run(["rm", "-rf", str(data_dir)], check=False)


@pytest.mark.slow  # a whole nodus dev (registry, image push, podman hosts), about 30 s (slow tier)
def test_dev_says_the_embedded_database_stopped_and_warns_of_nothing(tmp_path: Path) -> None:
    """Issue 16: every start printed pgserver's RuntimeDirWarning (no XDG_RUNTIME_DIR, as on servers and in
    containers), and Ctrl-C said nothing about the database stopping."""
    data_dir = Path(f"/tmp/nodus-dev-{os.getpid()}-quiet")  # short: PostgreSQL's socket path is limited
    env = {k: v for k, v in os.environ.items() if k not in ("NODUS_DATABASE_URL", "XDG_RUNTIME_DIR")}
    args = [sys.executable, "-m", "nodus.cli.main", "dev", "--data-dir", str(data_dir), "--port", str(free_port())]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert process.stdout is not None
        output = []
        for line in process.stdout:
            output.append(line)
            if "export KUBECONFIG=" in line or len(output) > 200:
                break
        process.send_signal(signal.SIGINT)  # Ctrl-C
        rest, _ = process.communicate(timeout=60)
        output.append(rest)
        text = "".join(output)
        assert process.returncode == 0, text
        assert "XDG_RUNTIME_DIR" not in text and "Warning:" not in text, text
        stopping = text.index(f"stopping the embedded database under {data_dir / 'postgres'} ...")
        assert text.index("embedded database stopped") > stopping, text
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        subprocess.run(["rm", "-rf", str(data_dir)], check=False)
