"""The development base image for tests (Debian minbase + python3, ``nodus.cli.devimages``): built once into
``.cache/images`` (about 20 s with Debian's mirror reachable), imported into podman once per machine."""

from __future__ import annotations

import functools
from pathlib import Path

from nodus.cli import devimages

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "images"


@functools.cache
def base_image() -> str:
    """``localhost/nodus/base:<recipe tag>``, present in podman's local store."""
    return devimages.import_into_podman(devimages.base_tarball(CACHE), f"localhost/nodus/base:{devimages.tag()}")
