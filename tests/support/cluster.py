"""A real ``nodus apiserver`` process for end-to-end tests, with TLS and a token file of users.

Users: ``admin`` (system:masters), ``controllers`` (the controllers' own identity, group
system:nodus:controllers), ``prometheus`` (group system:monitoring: reads /metrics) and ``alice``,
``bob``, ``carol``, ``dave`` (plain users whose rights come only from Project membership). Each user
gets a kubeconfig for kubectl and the kubernetes client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from nodus.cli import certificates, kubeconfig
from nodus.storage import database

USERS = ("admin", "controllers", "prometheus", "alice", "bob", "carol", "dave")
GROUPS = {"admin": "system:masters", "controllers": "system:nodus:controllers", "prometheus": "system:monitoring"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    url: str
    ca_file: Path
    directory: Path
    tokens: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log_file: Path | None = None
    kubeconfigs: dict[str, Path] = field(default_factory=dict)
    database_url: str = ""

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def client(self, user: str = "admin", **kwargs: object) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            verify=self.tls(),
            headers={"Authorization": f"Bearer {self.tokens[user]}"},
            timeout=30,
            **kwargs,
        )  # type: ignore[arg-type]

    def async_client(self, user: str = "admin", **kwargs: object) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            verify=self.tls(),
            headers={"Authorization": f"Bearer {self.tokens[user]}"},
            timeout=30,
            **kwargs,
        )  # type: ignore[arg-type]

    def kubeconfig(self, user: str = "admin", namespace: str = "default") -> Path:
        key = f"{user}-{namespace}"
        if key not in self.kubeconfigs:
            path = self.directory / f"kubeconfig-{key}"
            kubeconfig.write(path, self.url, self.ca_file, self.tokens[user], namespace=namespace, user=user)
            self.kubeconfigs[key] = path
        return self.kubeconfigs[key]

    def logs(self) -> str:
        return self.log_file.read_text() if self.log_file and self.log_file.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(directory: Path, database_url: str, extra_args: tuple[str, ...] = (), migrate: bool = True) -> Cluster:
    directory.mkdir(parents=True, exist_ok=True)
    files = certificates.ensure_serving(directory / "pki", ["127.0.0.1", "localhost"])
    tokens = {user: secrets.token_urlsafe(24) for user in USERS}
    token_file = directory / "tokens.csv"
    token_file.write_text(
        "".join(f'{token},{user},{user}-uid,"{GROUPS.get(user, "developers")}"\n' for user, token in tokens.items())
    )
    port = free_port()
    log_file = directory / "apiserver.log"
    args = [
        sys.executable,
        "-m",
        "nodus.cli.main",
        "apiserver",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tls-cert-file",
        str(files.cert),
        "--tls-private-key-file",
        str(files.key),
        "--token-auth-file",
        str(token_file),
        "--blob-store",
        str(directory / "blobs"),
        *(("--migrate",) if migrate else ()),
        *extra_args,
    ]
    env = {**os.environ, "NODUS_DATABASE_URL": database_url}
    with log_file.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    cluster = Cluster(
        f"https://127.0.0.1:{port}", files.ca_cert, directory, tokens, process, log_file, database_url=database_url
    )
    deadline = time.monotonic() + 60
    tls = cluster.tls()
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nodus apiserver exited with {process.returncode}:\n{cluster.logs()}")
        try:
            if httpx.get(f"{cluster.url}/readyz", verify=tls, timeout=2).status_code == 200:
                return cluster
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    cluster.stop()
    raise RuntimeError(f"nodus apiserver did not become ready:\n{cluster.logs()}")


@contextlib.contextmanager
def on_own_database(database_server: str, directory: Path, extra_args: tuple[str, ...] = ()) -> Iterator[Cluster]:
    """A cluster on a fresh database of its own (dropped afterwards): for tests that compact the watch log,
    run controllers or otherwise must not share the session's cluster."""
    url = asyncio.run(database.create_database(database_server))
    try:
        running = start(directory, url, extra_args=extra_args)
        try:
            yield running
        finally:
            running.stop()
    finally:
        asyncio.run(database.drop_database(url))
