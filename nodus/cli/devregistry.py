"""The image registry of ``nodus dev``: the development images served on 127.0.0.1 so agents pull them offline.

:func:`start` runs the CNCF distribution registry (Debian's ``docker-registry serve <config.yml>``) on
``127.0.0.1:<port>`` with its storage under ``<data dir>/registry``, waits until ``/v2/`` answers, and pushes the
base image (``nodus.cli.devimages``) as ``localhost:<port>/nodus/python:3.11``, and the PyTorch image as
``localhost:<port>/nodus/pytorch:<torch version>`` only when it is built already (starting ``nodus dev`` never
builds torch). A push is skipped when the registry serves that tag with the same image already: the manifest's
config digest equals the local image's id (both are the digest of the image's configuration).

When the port is taken by a registry that serves ``nodus/python:3.11`` (another ``nodus dev``, or one whose
registry outlived it), that registry is reused and left running; when it is taken by anything else, :func:`start`
raises :class:`RegistryError` naming ``--registry-port``. :meth:`DevRegistry.stop` stops a registry this process
started, never one it reused.

The registry speaks plain HTTP without authentication and listens on loopback only: agents are told it is
insecure (:attr:`DevRegistry.insecure_registries`, both ``localhost:<port>`` as references name it and
``127.0.0.1:<port>``), and containers, which have network namespaces of their own, do not reach it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from nodus.cli import devimages

DEFAULT_PORT = 5000
PYTHON = "nodus/python:3.11"
"""Where the base image is pushed (repository:tag): its Python is Debian bookworm's 3.11."""
START_TIMEOUT = 20.0
PUSH_TIMEOUT = 900
_MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


class RegistryError(Exception):
    """The dev registry could not be started or filled; the message says why and what to change."""


def pytorch_name(version: str | None = None) -> str:
    """Where the PyTorch image is pushed: ``nodus/pytorch:<torch version>``."""
    return f"nodus/pytorch:{version or devimages.torch_version()}"


@dataclass
class DevRegistry:
    """A registry serving the development images on ``127.0.0.1:port``; ``pushed`` maps each ``repository:tag``
    it serves for nodus to the local image it holds, ``uploaded`` the names this start had to push (the others
    were served already)."""

    port: int
    process: subprocess.Popen[bytes] | None = None
    pushed: dict[str, str] = field(default_factory=dict)
    uploaded: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def insecure_registries(self) -> tuple[str, ...]:
        """The agents' ``--insecure-registry`` entries for this registry, as references name it and by address."""
        return (f"localhost:{self.port}", self.address)

    @property
    def reused(self) -> bool:
        """Whether another process runs this registry (it is left running by :meth:`stop`)."""
        return self.process is None

    def reference(self, name: str) -> str:
        """The pullable reference of ``repository:tag`` (``localhost:5000/nodus/python:3.11``)."""
        return f"localhost:{self.port}/{name}"

    def stop(self) -> None:
        """Stops the registry process this object started (its storage stays for the next start)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def start(data_dir: Path, port: int = DEFAULT_PORT, *, images: Path | None = None) -> DevRegistry:
    """The registry on ``127.0.0.1:port`` with the development images pushed (see the module docstring); the base
    image is built into ``images`` (default ``<data dir>/images``) first if missing. Blocking."""
    cache = images or data_dir / "images"
    root = data_dir / "registry"
    if _port_free(port):
        registry = DevRegistry(port, _serve(root, port))
    elif _is_registry(port) and _config_digest(port, PYTHON) is not None:
        registry = DevRegistry(port)
    else:
        raise RegistryError(
            f"127.0.0.1:{port} is taken by something that is not a nodus dev registry: choose another port with "
            f"--registry-port (0 runs no registry)"
        )
    try:
        local = {PYTHON: devimages.base_image(cache)}
        if devimages.pytorch_available(cache):
            local[pytorch_name()] = devimages.pytorch_image(cache)
        for name, image in local.items():
            _push_unless_served(registry, root, image, name)
    except devimages.ImageBuildError as exc:
        registry.stop()
        raise RegistryError(f"the development images: {exc}") from None
    except BaseException:
        registry.stop()
        raise
    return registry


def podman_problem() -> str | None:
    """Why podman cannot run containers here (its own last words), or None when ``podman info`` answers."""
    try:
        result = subprocess.run(
            [*devimages.PODMAN, "info", "--format", "{{.Host.OCIRuntime.Name}}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if result.returncode != 0:
        return (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
    return None


def _serve(root: Path, port: int) -> subprocess.Popen[bytes]:
    (root / "data").mkdir(parents=True, exist_ok=True)
    config = root / "config.yml"
    # Loopback only and no deletes: the registry has no authentication.
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {json.dumps(str(root / 'data'))}\n  delete:\n    enabled: false\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log_path = root / "registry.log"
    with log_path.open("ab") as log:
        try:
            process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise RegistryError(f"cannot run docker-registry (the Debian package docker-registry): {exc}") from None
    deadline = time.monotonic() + START_TIMEOUT
    while not _is_registry(port):
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise RegistryError(f"docker-registry exited ({process.returncode}): {' '.join(tail)}")
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RegistryError(f"docker-registry did not answer on 127.0.0.1:{port} within {START_TIMEOUT:g} s")
        time.sleep(0.05)
    return process


def _push_unless_served(registry: DevRegistry, root: Path, image: str, name: str) -> None:
    image_id = _image_id(image)
    if _config_digest(registry.port, name) != image_id:
        root.mkdir(parents=True, exist_ok=True)
        command = [
            *devimages.PODMAN,
            "push",
            "--quiet",
            "--tls-verify=false",
            "--",
            image,
            f"{registry.address}/{name}",
        ]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=PUSH_TIMEOUT)
        except subprocess.CalledProcessError as exc:
            raise RegistryError(f"podman push {image} failed: {(exc.stderr or '').strip()[-500:]}") from None
        except subprocess.TimeoutExpired:
            raise RegistryError(f"podman push {image} did not finish in {PUSH_TIMEOUT} s") from None
        registry.uploaded.append(name)
    registry.pushed[name] = image


def _image_id(image: str) -> str:
    done = subprocess.run(
        [*devimages.PODMAN, "image", "inspect", "--format", "{{.Id}}", image],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RegistryError(f"podman cannot inspect {image}: {done.stderr.strip()}")
    return "sha256:" + done.stdout.strip().removeprefix("sha256:")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        # As the registry's own listener does (Go sets SO_REUSEADDR): connections it closed last run, lingering in
        # TIME_WAIT, do not make its port taken.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _get(port: int, path: str, accept: str = "") -> tuple[int, dict[str, str], bytes] | None:
    """A GET on the port's plain HTTP: status, headers (lower-case) and at most 1 MiB of body; None when nothing
    answers HTTP there."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=3) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read(1 << 20)
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, b""
    except (OSError, ValueError):
        return None


def _is_registry(port: int) -> bool:
    """Whether a registry v2 answers on the port (``/v2/`` names the distribution API version, as registries do)."""
    answer = _get(port, "/v2/")
    return (
        answer is not None and answer[0] == 200 and answer[1].get("docker-distribution-api-version") == "registry/2.0"
    )


def _config_digest(port: int, name: str) -> str | None:
    """The config digest of the image the registry serves as ``repository:tag``, or None if it serves none."""
    repository, _, tag = name.rpartition(":")
    answer = _get(port, f"/v2/{repository}/manifests/{tag}", _MANIFEST_TYPES)
    if answer is None or answer[0] != 200:
        return None
    try:
        digest = json.loads(answer[2])["config"]["digest"]
    except (ValueError, KeyError, TypeError):
        return None
    return digest if isinstance(digest, str) else None
