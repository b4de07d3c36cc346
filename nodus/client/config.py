"""Where the API server is and how to authenticate to it, usually read from a kubeconfig.

A kubeconfig may embed the CA and client certificate as base64 (``certificate-authority-data``,
``client-certificate-data``, ``client-key-data``). TLS libraries want files, so embedded data is
written once per process to a private temporary directory (mode 0700, files 0600) that is removed
at exit. Relative file paths in a kubeconfig are relative to the kubeconfig's directory.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import functools
import hashlib
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class ClientConfig:
    """The server URL and credentials; ``namespace`` is the kubeconfig context's default project."""

    server: str
    token: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    namespace: str | None = None
    # The files the kubeconfig's user section names (tokenFile, client certificate and key): secrets
    # that whoever hides credentials must hide too.
    user_files: tuple[str, ...] = ()

    def referenced_files(self) -> tuple[str, ...]:
        """Every credential file this configuration was read from (not the CA: it is public)."""
        return self.user_files

    @classmethod
    def from_kubeconfig(cls, path: str | Path, context: str | None = None) -> ClientConfig:
        """Read ``context`` (default: ``current-context``) of the kubeconfig at ``path``.

        Supports ``token`` and ``tokenFile``, ``certificate-authority(-data)`` and
        ``client-certificate(-data)``/``client-key(-data)``. Raises ``ValueError`` for a kubeconfig
        that does not name a usable context, cluster or user.
        """
        path = Path(path)
        document = yaml.safe_load(path.read_text())
        if not isinstance(document, dict):
            raise ValueError(f"{path}: not a kubeconfig")
        context_name = context or document.get("current-context")
        if not context_name:
            raise ValueError(f"{path}: no context given and no current-context")
        ctx = _named(document, "contexts", "context", context_name, path)
        cluster = _named(document, "clusters", "cluster", ctx.get("cluster"), path)
        user = _named(document, "users", "user", ctx.get("user"), path) if ctx.get("user") else {}
        server = cluster.get("server")
        if not isinstance(server, str) or not server:
            raise ValueError(f"{path}: cluster {ctx.get('cluster')!r} has no server")
        base = path.parent
        token = user.get("token")
        user_files = [
            str(_resolve(base, str(user[k]))) for k in ("tokenFile", "client-certificate", "client-key") if user.get(k)
        ]
        if not token and user.get("tokenFile"):
            token = _resolve(base, user["tokenFile"]).read_text().strip()
        return cls(
            server=server.rstrip("/"),
            token=str(token) if token else None,
            ca_file=_file(base, cluster, "certificate-authority", "ca.crt"),
            cert_file=_file(base, user, "client-certificate", "client.crt"),
            key_file=_file(base, user, "client-key", "client.key"),
            namespace=ctx.get("namespace") or None,
            user_files=tuple(user_files),
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context that trusts ``ca_file`` (else the system store) and presents the client certificate."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def _named(document: dict[str, Any], section: str, field: str, name: object, path: Path) -> dict[str, Any]:
    for entry in document.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(field)
            return value if isinstance(value, dict) else {}
    raise ValueError(f"{path}: no {field} named {name!r} in {section}")


def _resolve(base: Path, name: str) -> Path:
    candidate = Path(os.path.expanduser(name))
    return candidate if candidate.is_absolute() else base / candidate


def _file(base: Path, section: dict[str, Any], key: str, filename: str) -> str | None:
    if section.get(f"{key}-data"):
        try:
            data = base64.b64decode(section[f"{key}-data"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"{key}-data is not valid base64") from exc
        return str(_write_private(data, filename))
    if section.get(key):
        return str(_resolve(base, str(section[key])))
    return None


@functools.cache
def _private_dir() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="nodus-kubeconfig-"))  # mode 0700
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


def _write_private(data: bytes, filename: str) -> Path:
    """Write ``data`` to the process's private directory, named by its hash so each is written once."""
    target = _private_dir() / f"{hashlib.sha256(data).hexdigest()[:16]}-{filename}"
    if not target.exists():
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    return target
