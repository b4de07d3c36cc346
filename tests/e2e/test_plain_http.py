"""``nodus apiserver`` takes bearer tokens over plain HTTP only when told a TLS terminator is in front (issue 15 §5)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import free_port

pytestmark = pytest.mark.e2e


def _command(tmp_path: Path, port: int, *flags: str) -> tuple[list[str], str]:
    token = secrets.token_urlsafe(24)
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(f'{token},admin,admin-uid,"system:masters"\n')
    command = [sys.executable, "-m", "nodus.cli.main", "apiserver", "--host", "127.0.0.1", "--port", str(port)]
    return [*command, "--token-auth-file", str(tokens), *flags], token


def test_without_tls_the_server_refuses_to_start(database_url: str, tmp_path: Path) -> None:
    command, _ = _command(tmp_path, free_port())
    # Unpatched, it served the tokens in clear text: the run times out (and is killed) instead of exiting.
    environment = {**os.environ, "NODUS_DATABASE_URL": database_url}
    done = subprocess.run(command, check=False, env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "--tls-cert-file" in done.stderr and "--behind-tls-terminator" in done.stderr
    assert "clear text" in done.stderr


def test_behind_a_tls_terminator_it_serves_plain_http(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    command, token = _command(tmp_path, port, "--behind-tls-terminator")
    log = (tmp_path / "apiserver.log").open("wb")
    process = subprocess.Popen(
        command, env={**os.environ, "NODUS_DATABASE_URL": database_url}, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        projects = httpx.get(f"{url}/apis/nodus.dev/v1/projects", headers={"Authorization": f"Bearer {token}"})
        assert projects.status_code == 200, (tmp_path / "apiserver.log").read_text()
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
