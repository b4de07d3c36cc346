"""A real OCI registry for tests: the CNCF distribution registry (Debian's ``docker-registry``) on 127.0.0.1.

:func:`running_registry` starts ``docker-registry serve <config.yml>`` on a free port with its storage under a
directory the caller gives, optionally behind htpasswd (bcrypt) authentication, waits until ``/v2/`` answers, yields
a :class:`Registry` and stops the process when the block ends. The registry speaks plain HTTP (no TLS): clients
need ``--tls-verify=false``, which is what the agent's ``insecure_registries`` is for. :meth:`Registry.stop` and
:meth:`Registry.start` stop and restart it on the same port and storage (a test of "no registry traffic").
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

PODMAN = ("podman", "--cgroup-manager=cgroupfs")
START_TIMEOUT = 20.0


class Registry:
    """One registry process; ``address`` is ``127.0.0.1:PORT``, ``username``/``password`` are set when auth is on."""

    def __init__(self, root: Path, *, auth: bool) -> None:
        self.root = root
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.username = "nodus-test" if auth else ""
        # Characters a shell or a URL would mangle: a credential must pass through the agent as bytes.
        self.password = f"p@ss:w0rd'$!{secrets.token_hex(6)}" if auth else ""
        self._process: subprocess.Popen[bytes] | None = None
        self._config = root / "config.yml"
        lines = [
            "version: 0.1",
            "log:",
            "  level: warn",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {root / 'data'}",
            "http:",
            f"  addr: {self.address}",
        ]
        if auth:
            htpasswd = subprocess.run(
                ["htpasswd", "-Bbn", self.username, self.password], check=True, capture_output=True, text=True
            ).stdout
            (root / "htpasswd").write_text(htpasswd)
            lines += ["auth:", "  htpasswd:", "    realm: nodus-test", f"    path: {root / 'htpasswd'}"]
        self._config.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        """Starts the process and waits until ``/v2/`` answers (200, or 401 with auth on)."""
        log = (self.root / "registry.log").open("ab")
        self._process = subprocess.Popen(
            ["docker-registry", "serve", str(self._config)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {(self.root / 'registry.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2):
                    return
            except urllib.error.HTTPError as error:
                if error.code == 401:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"docker-registry did not answer on {self.address} within {START_TIMEOUT:g} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stops the process (the storage stays, for a later :meth:`start`)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def push(self, local_image: str, repository_tag: str) -> str:
        """Pushes the local image as ``<address>/<repository_tag>``; the manifest digest the registry stored."""
        digestfile = self.root / f"digest-{secrets.token_hex(4)}"
        creds = ["--creds", f"{self.username}:{self.password}"] if self.username else []
        # --creds is on a command line: acceptable for a test registry's throwaway password, never in the agent.
        subprocess.run(
            [
                *PODMAN,
                "push",
                "--quiet",
                "--tls-verify=false",
                "--digestfile",
                str(digestfile),
                *creds,
                "--",
                local_image,
                f"{self.address}/{repository_tag}",
            ],
            check=True,
            capture_output=True,
        )
        digest = digestfile.read_text().strip()
        digestfile.unlink()
        return digest


@contextlib.contextmanager
def running_registry(root: Path, *, auth: bool = False) -> Iterator[Registry]:
    """A started :class:`Registry` with its files under ``root``, stopped when the block ends."""
    root.mkdir(parents=True, exist_ok=True)
    registry = Registry(root, auth=auth)
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
