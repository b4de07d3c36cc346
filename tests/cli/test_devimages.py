"""The development images and nodus dev's registry, with real podman, real registries and real sockets.

The base image runs ``python`` and ``python3``; its tag follows its package list. The dev registry starts, serves
the base image pullable as ``localhost:<port>/nodus/python:3.11``, skips a push of an image it serves already,
reuses a nodus registry found on its port without ever stopping it, and refuses a port held by anything else
(an HTTP server, a registry look-alike without the image, a socket that never speaks HTTP). The PyTorch image
(slow: about 700 MB are unpacked the first time) imports the pinned torch.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.cli import devimages, devregistry, main
from tests.support import images

pytestmark = pytest.mark.integration  # real programs and engines: left out of `make test-fast`

RUN = [*devimages.PODMAN, "run", "--rm", "--runtime", "runc", "--network", "none", *devimages.ULIMITS]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _skopeo_digest(reference: str) -> str:
    """The manifest digest a registry serves, read by skopeo as a client would (plain HTTP)."""
    out = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{reference}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    digest: str = json.loads(out)["config"]["digest"]
    return digest


@pytest.mark.parametrize("command", ["python", "python3"])
def test_the_base_image_runs_python_as_python_and_python3(command: str) -> None:
    said = subprocess.run(
        [*RUN, images.base_image(), command, "-c", "import sys; print(sys.version_info[:2])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert said.strip() == "(3, 11)"


def test_the_recipe_tag_follows_the_package_list_not_its_order() -> None:
    assert "python-is-python3" in devimages.PACKAGES
    without = tuple(p for p in devimages.PACKAGES if p != "python-is-python3")
    assert devimages.tag(without) != devimages.tag()
    assert devimages.tag(tuple(reversed(devimages.PACKAGES))) == devimages.tag()
    assert devimages.tag((*devimages.PACKAGES, "curl")) != devimages.tag()
    # The PyTorch tag moves with the base's and with torch's version.
    assert devimages.pytorch_tag("2.13.0") != devimages.pytorch_tag("2.13.1")
    assert devimages.pytorch_tag("2.13.0").startswith("2.13.0-")


def test_the_torch_pin_is_read_from_pyproject(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project.optional-dependencies]\ntest = ["pytest", "torch==9.8.7"]\n')
    assert devimages.torch_version(pyproject) == "9.8.7"
    pyproject.write_text('test = ["torch>=2"]\n')
    with pytest.raises(devimages.ImageBuildError, match="pins no torch"):
        devimages.torch_version(pyproject)


def test_the_dev_registry_serves_the_base_image_and_skips_pushing_it_again(tmp_path: Path) -> None:
    port = _free_port()
    first = devregistry.start(tmp_path, port, images=images.CACHE)
    try:
        assert not first.reused
        # The PyTorch image goes too only when it is built already (nodus dev never builds it).
        with_torch = devimages.pytorch_available(images.CACHE)
        expected = [devregistry.PYTHON, *([devregistry.pytorch_name()] if with_torch else [])]
        assert first.uploaded == expected and list(first.pushed) == expected
        assert first.reference(devregistry.PYTHON) == f"localhost:{port}/nodus/python:3.11"
        assert set(first.insecure_registries) == {f"localhost:{port}", f"127.0.0.1:{port}"}
        served = _skopeo_digest(first.reference(devregistry.PYTHON))
        local = subprocess.run(
            [*devimages.PODMAN, "image", "inspect", "--format", "{{.Id}}", images.base_image()],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert served == f"sha256:{local.removeprefix('sha256:')}"

        # Another nodus dev on the same port: the running registry is reused, nothing is pushed again, and
        # stopping the second leaves the first's registry serving.
        second = devregistry.start(tmp_path / "other", port, images=images.CACHE)
        assert second.reused and second.uploaded == []
        second.stop()
        assert _skopeo_digest(first.reference(devregistry.PYTHON)) == served
    finally:
        first.stop()

    # Started again on the same data directory: the storage still holds the image, so nothing is pushed.
    again = devregistry.start(tmp_path, port, images=images.CACHE)
    try:
        assert not again.reused and again.uploaded == []
        assert _skopeo_digest(again.reference(devregistry.PYTHON)) == served
    finally:
        again.stop()
    with pytest.raises(subprocess.CalledProcessError):
        _skopeo_digest(again.reference(devregistry.PYTHON))  # stopped: nothing answers any more


class _Impostor(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200; as a registry look-alike it also names the distribution API."""

    look_alike = False

    def do_GET(self) -> None:
        self.send_response(200)
        if self.look_alike:
            self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _LookAlike(_Impostor):
    look_alike = True


@pytest.fixture(params=["http", "look-alike", "silent"])
def taken_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port held by something that is not a nodus registry."""
    if request.param == "silent":  # accepts connections and never answers
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            yield listener.getsockname()[1]
        return
    handler = _LookAlike if request.param == "look-alike" else _Impostor
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_the_dev_registry_refuses_a_port_held_by_something_else(taken_port: int, tmp_path: Path) -> None:
    with pytest.raises(devregistry.RegistryError, match="--registry-port"):
        devregistry.start(tmp_path, taken_port, images=images.CACHE)
    assert not (tmp_path / "registry" / "config.yml").exists()


def test_the_session_registry_serves_the_base_image_pullable() -> None:
    reference = images.registry_python_image()
    assert reference == f"{images.session_registry().address}/nodus/python:3.11"
    assert _skopeo_digest(reference).startswith("sha256:")


@pytest.mark.slow
def test_the_pytorch_image_imports_the_pinned_torch() -> None:
    reference = images.pytorch_image()
    assert reference == devimages.pytorch_reference()
    said = subprocess.run(
        [*RUN, reference, "python", "-c", "import torch; print(torch.__version__, float(torch.ones(3).sum()))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert said[0].split("+")[0] == devimages.torch_version() and said[1] == "3.0"
    # Available without a build from now on: in podman's store (a machine that built it once, whatever checkout)
    # and, where this checkout built it, saved in its cache too.
    assert devimages.pytorch_available(images.CACHE)


@pytest.mark.parametrize(
    "hostile", ["http://evil:5000", "evil:5000/x", "user:pw@evil:5000", "evil:0", "evil:65536", ":5000", "a b:1", ""]
)
def test_nodus_dev_refuses_an_insecure_registry_that_is_not_host_port(hostile: str) -> None:
    with pytest.raises(SystemExit):
        main.parser().parse_args(["dev", "--insecure-registry", hostile])


def test_nodus_dev_registry_flags() -> None:
    args = main.parser().parse_args(["dev", "--insecure-registry", "Reg.Example:5001", "--insecure-registry", "h"])
    assert args.registry_port == devregistry.DEFAULT_PORT and args.insecure_registry == ["reg.example:5001", "h"]
    assert main.parser().parse_args(["dev", "--registry-port", "0"]).registry_port == 0
