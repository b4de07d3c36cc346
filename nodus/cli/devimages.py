"""The development base image: Debian with python3, built once with mmdebstrap and cached.

``nodus dev`` and the tests need an image that works without Docker Hub: a root filesystem built from
Debian's own mirror (``mmdebstrap --variant=minbase``), as a tarball that ``podman import`` turns into an
image. The tarball is cached under a directory the caller gives (``<data dir>/images`` for ``nodus dev``,
``.cache/images`` for the tests), named by a hash of its recipe, so a change of recipe builds a new one
and an unchanged one is never built twice. Builds are serialised by a lock file (two test processes, or
``nodus dev`` and a test, may ask at once) and written to a temporary name renamed into place, so a build
cut short leaves nothing a later call would take for an image.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

SUITE = "bookworm"
PACKAGES = ("python3", "ca-certificates")
"""What the base image holds beyond Debian's minbase: the examples and the tests' programs are shell and
Python; ca-certificates for HTTPS from inside."""
BUILD_TIMEOUT = 1800


class ImageBuildError(Exception):
    """The base image could not be built; the message says why (mmdebstrap's last lines)."""


def recipe() -> dict[str, object]:
    return {"builder": "mmdebstrap", "suite": SUITE, "variant": "minbase", "include": sorted(PACKAGES)}


def tag() -> str:
    """The image's tag: a function of the recipe (``bookworm-1a2b3c4d5e6f``)."""
    digest = hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:12]
    return f"{SUITE}-{digest}"


def base_tarball(cache: Path) -> Path:
    """The root filesystem tarball of the base image under ``cache``, built first if missing. Blocking (a
    build takes about 20 s with a reachable Debian mirror); raises :class:`ImageBuildError`."""
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"base-{tag()}.tar"
    if target.exists():
        return target
    with _locked(cache / ".build.lock"):
        if target.exists():  # built by whoever held the lock before us
            return target
        if shutil.which("mmdebstrap") is None:
            raise ImageBuildError("mmdebstrap is not installed (make installs it: .ci/install-system-packages)")
        partial = cache / f".base-{tag()}.tar.partial"
        partial.unlink(missing_ok=True)
        command = [
            "mmdebstrap",
            "--variant=minbase",
            "--format=tar",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(partial),
        ]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        except subprocess.CalledProcessError as exc:
            partial.unlink(missing_ok=True)
            tail = "\n".join((exc.stderr or "").strip().splitlines()[-5:])
            raise ImageBuildError(f"mmdebstrap failed ({exc.returncode}): {tail}") from None
        except subprocess.TimeoutExpired:
            partial.unlink(missing_ok=True)
            raise ImageBuildError(f"mmdebstrap did not finish in {BUILD_TIMEOUT} s") from None
        os.replace(partial, target)
    return target


def import_into_podman(tarball: Path, reference: str, podman: str = "podman") -> str:
    """``podman import`` the tarball as ``reference`` (``localhost/nodus/base:<tag>``) unless it is there
    already; returns the reference. The image runs ``/bin/sh`` when nothing else is given."""
    if subprocess.run([podman, "image", "exists", reference], check=False).returncode == 0:
        return reference
    change = [
        "--change",
        'CMD ["/bin/sh"]',
        "--change",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ]
    try:
        subprocess.run([podman, "import", *change, str(tarball), reference], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise ImageBuildError(f"podman import failed: {(exc.stderr or '').strip()[-500:]}") from None
    return reference


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
