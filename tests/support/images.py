"""The development images for tests (``nodus.cli.devimages``), built once into ``.cache/images``, and one test
registry per session serving the base image.

:func:`base_image` (Debian minbase + python3 and python, about 20 s to build with Debian's mirror reachable) and
:func:`pytorch_image` (base + torch's CPU build; a minute or more the first time, then loaded from its saved archive)
are local references in podman's store. :func:`registry_python_image` starts ONE registry for the whole test
session (``tests.support.registry``, stopped when the session's interpreter exits), pushes the base image there
as ``<address>/nodus/python:3.11`` and returns that pullable reference: Jobs name it, and the agents that pull it
run with ``--insecure-registry`` :func:`session_registry`'s ``address``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import tempfile
from pathlib import Path

from nodus.cli import devimages
from tests.support.registry import Registry, running_registry

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "images"
PYTHON = "nodus/python:3.11"


@functools.cache
def base_image() -> str:
    """``localhost/nodus/base:<recipe tag>``, present in podman's local store."""
    return devimages.base_image(CACHE)


@functools.cache
def pytorch_image() -> str:
    """``localhost/nodus/pytorch:<tag>`` (the base and the torch pinned in pyproject.toml), in podman's local store.
    Slow the first time on a machine: callers are slow tests."""
    return devimages.pytorch_image(CACHE)


@functools.cache
def session_registry() -> Registry:
    """The session's registry (plain HTTP on 127.0.0.1, no auth), started on first use and stopped at exit."""
    stack = contextlib.ExitStack()
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nodus-test-registry-")))
    registry = stack.enter_context(running_registry(root))
    atexit.register(stack.close)
    return registry


@functools.cache
def registry_python_image() -> str:
    """``<address>/nodus/python:3.11``: the base image, pushed to :func:`session_registry` once per session."""
    registry = session_registry()
    registry.push(base_image(), PYTHON)
    return f"{registry.address}/{PYTHON}"


@functools.cache
def registry_pytorch_image() -> str:
    """``<address>/nodus/pytorch:<torch version>``: the PyTorch image (torch, transformers, accelerate), built once per
    machine and pushed to :func:`session_registry` once per session (about 1 GB: the tests that train use it)."""
    registry = session_registry()
    name = f"nodus/pytorch:{devimages.torch_version()}"
    registry.push(pytorch_image(), name)
    return f"{registry.address}/{name}"
