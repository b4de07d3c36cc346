"""The web console's static files, read once when the API server starts (ADR 0053).

Every regular file under ``nodus/console/`` is read into memory at start, keyed by its path relative
to that directory (``/``-separated). Serving is a lookup in that table, never a filesystem path built
from the request: a name with ``..``, an absolute path, a NUL or a backslash is simply not a key, so
no request can read outside the directory, whatever its encoding. Symbolic links are not followed
and dot-files are left out (an editor's swap file is not served).

The **version** is the first 12 hex digits of a SHA-256 over every file's relative path and bytes:
assets are served under ``/console/assets/<version>/`` with a year-long immutable cache lifetime,
and a new build (any file changed) is a new version, so browsers never mix old and new files.
``index.html`` is served with each ``{{ASSETS}}`` replaced by that prefix.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import nodus

DIRECTORY = Path(nodus.__file__).resolve().parent / "console"
PLACEHOLDER = b"{{ASSETS}}"
ASSETS_PREFIX = "/console/assets"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
    ".map": "application/json",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}


@dataclass(frozen=True)
class Asset:
    content: bytes
    content_type: str


class ConsoleAssets:
    """The files of one console build and their version."""

    def __init__(self, files: dict[str, bytes]) -> None:
        digest = hashlib.sha256()
        for name in sorted(files):
            content = files[name]
            digest.update(f"{name}\0{len(content)}\0".encode())
            digest.update(content)
        self.version = digest.hexdigest()[:12]
        self.prefix = f"{ASSETS_PREFIX}/{self.version}"
        self._assets = {
            name: Asset(content, CONTENT_TYPES.get(os.path.splitext(name)[1].lower(), "application/octet-stream"))
            for name, content in files.items()
        }
        index = files.get("index.html")
        self.index = index.replace(PLACEHOLDER, self.prefix.encode()) if index is not None else None

    @classmethod
    def load(cls, directory: Path = DIRECTORY) -> ConsoleAssets:
        """Read every regular, non-hidden file under ``directory`` (none when it does not exist)."""
        files: dict[str, bytes] = {}
        if directory.is_dir():
            for root, dirs, names in os.walk(directory, followlinks=False):
                dirs[:] = [d for d in dirs if not d.startswith(".") and not (Path(root) / d).is_symlink()]
                for name in names:
                    path = Path(root) / name
                    if name.startswith(".") or path.is_symlink() or not path.is_file():
                        continue
                    files[path.relative_to(directory).as_posix()] = path.read_bytes()
        return cls(files)

    def get(self, version: str, name: str) -> Asset | None:
        """The file ``name`` of this build, when ``version`` is this build's (else None: 404)."""
        if version != self.version:
            return None
        return self._assets.get(name)

    def has(self, name: str) -> bool:
        return name in self._assets

    def url(self, name: str) -> str:
        """Where the browser fetches ``name`` of this build."""
        return f"{self.prefix}/{name}"
