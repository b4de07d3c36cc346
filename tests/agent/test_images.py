"""The agent's image cache against real registries (Debian's docker-registry) and the real podman and skopeo.

podman and skopeo run through a small wrapper script that appends each invocation (tool, pid, the mode of the
authfile it was given, the arguments) to a log and then execs the real binary: the log is how the tests count pulls
and tries, see that no password reaches a command line and that the authfile was 0600, and find a process to check
that it was killed. Every image the tests pull or push is untagged at the end; localhost/nodus/base is never removed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nodus.agent.images import Credentials, ImageCache, ImageError, credentials_from_secrets
from nodus.apimachinery.imagerefs import InvalidReference
from nodus.cli import devimages
from tests.support.registry import PODMAN, Registry, running_registry

pytestmark = pytest.mark.integration  # real programs and engines: left out of `make test-fast`

ROOT = Path(__file__).resolve().parents[2]
MISSING_DIGEST = "sha256:" + "0" * 64


@pytest.fixture(scope="module")
def base() -> str:
    return devimages.import_into_podman(
        devimages.base_tarball(ROOT / ".cache" / "images"), "localhost/nodus/base:" + devimages.tag()
    )


@pytest.fixture(scope="module")
def moved(base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Another image: the base image with one more ENV, made by podman commit of a container never started."""
    name = f"localhost/nodus-test/moved:{os.getpid()}"
    container = subprocess.run(
        [*PODMAN, "create", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096", base],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    try:
        subprocess.run(
            [*PODMAN, "commit", "--quiet", "--change", "ENV MOVED=1", container, name], check=True, capture_output=True
        )
    finally:
        subprocess.run([*PODMAN, "rm", "--force", container], check=True, capture_output=True)
    yield name
    subprocess.run([*PODMAN, "rmi", name], check=False, capture_output=True)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running
    _untag(running.address)


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry(tmp_path_factory.mktemp("auth-registry"), auth=True) as running:
        yield running
    _untag(running.address)


def _untag(address: str) -> None:
    """Removes every name under ``address`` (tags and name@digest) from podman's store, by name only: an image
    also named localhost/nodus/base keeps that name and its layers."""
    listed = json.loads(subprocess.run([*PODMAN, "images", "--format", "json"], check=True, capture_output=True).stdout)
    names = {name for image in listed for name in [*(image.get("Names") or []), *(image.get("Digests") or [])]}
    for image in listed:
        names.update(image.get("RepoDigests") or [])
    ours = sorted(name for name in names if name.startswith(f"{address}/"))
    for name in ours:
        subprocess.run([*PODMAN, "rmi", name], check=False, capture_output=True)


class Tools:
    """The wrapped podman and skopeo and their invocation log."""

    def __init__(self, directory: Path) -> None:
        self.log = directory / "invocations.log"
        self.log.touch()
        self.podman = self._wrap(directory, "podman")
        self.skopeo = self._wrap(directory, "skopeo")

    def _wrap(self, directory: Path, tool: str) -> str:
        real = shutil.which(tool)
        assert real is not None
        script = directory / tool
        script.write_text(
            "#!/bin/bash\n"
            'mode=-; prev=""\n'
            'for a in "$@"; do if [ "$prev" = --authfile ]; then mode=$(stat -c %a "$a"); fi; prev=$a; done\n'
            f'printf "%s\\t%s\\t%s\\t%s\\n" {tool} "$$" "$mode" "$*" >> {self.log}\n'
            f'exec {real} "$@"\n'
        )
        script.chmod(0o755)
        return str(script)

    def calls(self, tool: str, word: str = "") -> list[list[str]]:
        rows = [line.split("\t") for line in self.log.read_text().splitlines()]
        return [row for row in rows if row[0] == tool and (not word or word in row[3].split())]


@pytest.fixture
def tools(tmp_path: Path) -> Tools:
    (tmp_path / "bin").mkdir()
    return Tools(tmp_path / "bin")


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


def make_cache(tools: Tools, work_dir: Path, *insecure: str, **options: float) -> ImageCache:
    return ImageCache(
        insecure_registries=insecure,
        podman=tools.podman,
        skopeo=tools.skopeo,
        work_dir=work_dir,
        retry_delays=(0.0, 0.0),
        **options,
    )


def skopeo_digest(reference: str) -> str:
    out = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--no-tags", f"docker://{reference}"],
        check=True,
        capture_output=True,
    ).stdout
    digest: str = json.loads(out)["Digest"]
    return digest


def push_list(listed: str, image: str, destination: str) -> None:
    """Pushes a manifest list holding ``image`` to ``destination``; the local list is removed again."""
    subprocess.run([*PODMAN, "manifest", "create", listed], check=True, capture_output=True)
    try:
        subprocess.run(
            [*PODMAN, "manifest", "add", listed, f"containers-storage:{image}"], check=True, capture_output=True
        )
        subprocess.run(
            [*PODMAN, "manifest", "push", "--all", "--quiet", "--tls-verify=false", listed, f"docker://{destination}"],
            check=True,
            capture_output=True,
        )
    finally:
        subprocess.run([*PODMAN, "manifest", "rm", listed], check=False, capture_output=True)


def authfiles_left(work_dir: Path) -> list[Path]:
    return list(work_dir.glob("pull-*"))


def untag(name: str) -> None:
    subprocess.run([*PODMAN, "rmi", name], check=True, capture_output=True)


def image_id(reference: str) -> str:
    return subprocess.run(
        [*PODMAN, "image", "inspect", "--format", "{{.Id}}", reference], check=True, capture_output=True, text=True
    ).stdout.strip()


async def test_a_tag_resolves_to_the_registry_digest_and_a_pinned_digest_is_then_cached_without_the_registry(
    registry: Registry, base: str, tools: Tools, work_dir: Path
) -> None:
    pushed = registry.push(base, "t/base:v1")
    cache = make_cache(tools, work_dir, registry.address)
    reference = f"{registry.address}/t/base:v1"

    image = await cache.ensure(reference, credentials=None, pinned_digest=None)

    assert image.digest == pushed == skopeo_digest(reference)
    assert image.pinned == f"{registry.address}/t/base@{pushed}"
    assert image.reference == reference and image.image_id == image_id(base)
    assert (image.cmd, image.entrypoint, image.user, image.working_dir) == (["/bin/sh"], [], "", "")
    assert image.env["PATH"].startswith("/usr/local/sbin") and not image.cached
    assert len(tools.calls("podman", "pull")) == 1
    registry.stop()
    try:
        again = await cache.ensure(reference, credentials=None, pinned_digest=image.digest)
    finally:
        registry.start()
    assert again.cached and again.image_id == image.image_id and again.digest == pushed
    assert again.pull_seconds == 0.0
    assert len(tools.calls("podman", "pull")) == 1 and len(tools.calls("skopeo")) == 1


async def test_a_manifest_list_resolves_to_the_list_digest_the_registry_serves(
    registry: Registry, base: str, tools: Tools, work_dir: Path
) -> None:
    """A multi-platform tag: podman's RepoDigests then holds the list's and the instance's digests (three per name,
    measured), so the digest is the one the registry serves for the tag, as skopeo reports it."""
    listed = f"localhost/nodus-test/list:{os.getpid()}"
    reference = f"{registry.address}/t/list:v1"
    push_list(listed, base, reference)
    image = await make_cache(tools, work_dir, registry.address).ensure(reference, credentials=None, pinned_digest=None)
    assert image.digest == skopeo_digest(reference) != registry.push(base, "t/single:v1")
    assert image.image_id == image_id(base)


async def test_a_moved_tag_does_not_change_what_a_pinned_digest_gives(
    registry: Registry, base: str, moved: str, tools: Tools, work_dir: Path
) -> None:
    first = registry.push(base, "t/moving:v1")
    cache = make_cache(tools, work_dir, registry.address)
    reference = f"{registry.address}/t/moving:v1"
    assert (await cache.ensure(reference, credentials=None, pinned_digest=None)).digest == first
    second = registry.push(moved, "t/moving:v1")
    assert second != first

    pinned = await cache.ensure(reference, credentials=None, pinned_digest=first)
    assert (pinned.digest, pinned.image_id, pinned.cached) == (first, image_id(base), True)
    # Gone from this host, the pinned digest is pulled again by digest, not by the tag that moved.
    untag(f"{registry.address}/t/moving@{first}")
    repulled = await cache.ensure(reference, credentials=None, pinned_digest=first)
    assert (repulled.digest, repulled.image_id, repulled.cached) == (first, image_id(base), False)
    assert "MOVED" not in repulled.env
    assert tools.calls("podman", "pull")[-1][3].endswith(f"-- {registry.address}/t/moving@{first}")

    latest = await cache.ensure(reference, credentials=None, pinned_digest=None)
    assert (latest.digest, latest.image_id, latest.env.get("MOVED")) == (second, image_id(moved), "1")


async def test_a_digest_cached_under_another_repository_is_not_a_cache_hit(
    registry: Registry, base: str, tools: Tools, work_dir: Path
) -> None:
    """podman finds a local image by digest whatever the name: the cache must not, or a Job could run another
    repository's image (a private one pulled with another Job's credentials) by naming its digest."""
    pushed = registry.push(base, "t/owned:v1")
    cache = make_cache(tools, work_dir, registry.address)
    assert (await cache.ensure(f"{registry.address}/t/owned:v1", credentials=None, pinned_digest=None)).digest == pushed
    with pytest.raises(ImageError) as caught:
        await cache.ensure(f"{registry.address}/t/never-pushed:v1", credentials=None, pinned_digest=pushed)
    assert caught.value.reason == "ImageNotFound"


@pytest.mark.parametrize(
    ("path", "pinned"), [("t/present:nope", None), ("t/nothere:v1", None), ("t/present:v1", MISSING_DIGEST)]
)
async def test_a_missing_tag_repository_or_digest_is_image_not_found_and_permanent(
    registry: Registry, base: str, tools: Tools, work_dir: Path, path: str, pinned: str | None
) -> None:
    registry.push(base, "t/present:v1")
    cache = make_cache(tools, work_dir, registry.address)
    with pytest.raises(ImageError) as caught:
        await cache.ensure(f"{registry.address}/{path}", credentials=None, pinned_digest=pinned)
    assert (caught.value.reason, caught.value.permanent) == ("ImageNotFound", True)
    assert "manifest unknown" in str(caught.value) and f"{registry.address}/" in str(caught.value)
    assert "Correct spec.image" in str(caught.value)
    assert len(tools.calls("skopeo") + tools.calls("podman", "pull")) == 1  # permanent: never tried again


async def test_an_auth_registry_refuses_no_and_wrong_credentials_and_the_password_never_shows(
    auth_registry: Registry, base: str, tools: Tools, work_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth_registry.push(base, "p/refused:v1")
    cache = make_cache(tools, work_dir, auth_registry.address)
    reference = f"{auth_registry.address}/p/refused:v1"
    # Credentials the node has (a docker login of the agent's user) are not the Job's: never used.
    node_home = tmp_path / "node-home"
    (node_home / ".docker").mkdir(parents=True)
    login = base64.b64encode(f"{auth_registry.username}:{auth_registry.password}".encode()).decode()
    (node_home / ".docker" / "config.json").write_text(json.dumps({"auths": {auth_registry.address: {"auth": login}}}))
    monkeypatch.setenv("HOME", str(node_home))
    monkeypatch.setenv("DOCKER_CONFIG", str(node_home / ".docker"))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(node_home / ".docker" / "config.json"))

    for credentials in (None, Credentials(auth_registry.username, auth_registry.password + "x")):
        with pytest.raises(ImageError) as caught:
            await cache.ensure(reference, credentials=credentials, pinned_digest=None)
        assert (caught.value.reason, caught.value.permanent) == ("ImagePullUnauthorized", True)
        assert "authentication required" in str(caught.value) and "imagePullSecrets" in str(caught.value)
        assert auth_registry.password not in str(caught.value) and login not in str(caught.value)
    assert authfiles_left(work_dir) == []  # the authfile is gone after a failure too
    assert auth_registry.password not in tools.log.read_text()


@pytest.mark.parametrize("form", ["dockerconfigjson-auth", "dockerconfigjson-username", "username-password"])
async def test_credentials_from_a_secret_pull_from_an_auth_registry(
    auth_registry: Registry, base: str, tools: Tools, work_dir: Path, form: str
) -> None:
    user, password = auth_registry.username, auth_registry.password
    auth_registry.push(base, f"p/{form}:v1")
    entry: dict[str, str] = {"username": user, "password": password}
    if form == "dockerconfigjson-auth":
        entry = {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
    config = {
        "auths": {"other.example:5000": {"auth": "b3RoZXI6b3RoZXI="}, f"http://{auth_registry.address}/v2/": entry}
    }
    secret = (
        {"username": user.encode(), "password": password.encode()}
        if form == "username-password"
        else {".dockerconfigjson": json.dumps(config).encode()}
    )
    credentials = credentials_from_secrets([{"unrelated": b"x"}, secret], auth_registry.address)
    assert credentials == Credentials(user, password) and password not in repr(credentials)
    cache = make_cache(tools, work_dir, auth_registry.address)

    image = await cache.ensure(f"{auth_registry.address}/p/{form}:v1", credentials=credentials, pinned_digest=None)

    assert image.image_id == image_id(base) and not image.cached
    assert authfiles_left(work_dir) == []
    modes = {row[2] for row in tools.calls("skopeo") + tools.calls("podman", "pull")}
    assert modes == {"600"}
    assert password not in tools.log.read_text()


def test_docker_hub_credentials_match_every_spelling_and_malformed_secrets_are_refused() -> None:
    login = base64.b64encode(b"hub:pw").decode()
    for key in ("https://index.docker.io/v1/", "docker.io", "registry-1.docker.io", "index.docker.io"):
        secret = {".dockerconfigjson": json.dumps({"auths": {key: {"auth": login}}}).encode()}
        assert credentials_from_secrets([secret], "docker.io") == Credentials("hub", "pw")
        assert credentials_from_secrets([secret], "ghcr.io") is None
    for hostile in (
        b"not json",
        b"[]",
        b'{"auths": {"ghcr.io": {"auth": "%%%"}}}',
        b'{"auths": {"ghcr.io": 3}}',
        b'{"auths": {"ghcr.io": {"auth": "bm9jb2xvbg=="}}}',
    ):
        with pytest.raises(ImageError) as caught:
            credentials_from_secrets([{".dockerconfigjson": hostile}], "ghcr.io")
        assert caught.value.reason == "ImagePullUnauthorized" and hostile.decode() not in str(caught.value)
    with pytest.raises(ImageError):
        credentials_from_secrets([{"username": b"a:b", "password": b"pw"}], "ghcr.io")


async def test_a_plain_http_registry_not_named_insecure_is_untrusted(
    registry: Registry, base: str, tools: Tools, work_dir: Path
) -> None:
    registry.push(base, "t/untrusted:v1")
    with pytest.raises(ImageError) as caught:
        await make_cache(tools, work_dir).ensure(
            f"{registry.address}/t/untrusted:v1", credentials=None, pinned_digest=None
        )
    assert (caught.value.reason, caught.value.permanent) == ("ImageRegistryUntrusted", True)
    assert "HTTP response to HTTPS client" in str(caught.value) and "--insecure-registry" in str(caught.value)
    assert all("--tls-verify=true" in row[3].split() for row in tools.calls("skopeo"))


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_a_registry_that_is_down_is_pull_failed_retried_and_not_permanent(tools: Tools, work_dir: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    cache = make_cache(tools, work_dir, address)
    with pytest.raises(ImageError) as caught:
        await cache.ensure(f"{address}/t/x:v1", credentials=None, pinned_digest=None)
    assert (caught.value.reason, caught.value.permanent) == ("ImagePullFailed", False)
    assert "connection refused" in str(caught.value)
    assert len(tools.calls("skopeo")) == 3


async def test_a_registry_answering_503_is_pull_failed_tried_three_times_whatever_its_name_says(
    tools: Tools, work_dir: Path
) -> None:
    """Pinned, so podman itself prints the image's name: a repository named with words of the other reasons must
    not decide the reason."""
    pings: list[str] = []

    class Unavailable(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            pings.append(self.path)
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ImageError) as caught:
            await make_cache(tools, work_dir, address).ensure(
                f"{address}/unauthorized/certificate/x509:v1", credentials=None, pinned_digest=MISSING_DIGEST
            )
    finally:
        server.shutdown()
        server.server_close()
    assert (caught.value.reason, caught.value.permanent) == ("ImagePullFailed", False)
    assert "503 (Service Unavailable)" in str(caught.value)
    assert "unauthorized/certificate/x509" in str(caught.value)
    assert len(tools.calls("podman", "pull")) == 3 and len(pings) >= 3


@pytest.mark.parametrize(
    "hostile",
    [
        "--help",
        "a;rm -rf /",
        "-v",
        "--authfile=/etc/shadow",
        "$(touch /tmp/pwned)",
        "python:3.12 --privileged",
        "localhost/../etc/passwd",
        "docker.io/library/python:-rm",
        "127.0.0.1:5000/a@sha256:abc",
        "",
        " python",
    ],
)
async def test_hostile_references_are_refused_before_podman_runs(tools: Tools, work_dir: Path, hostile: str) -> None:
    with pytest.raises(InvalidReference):
        await make_cache(tools, work_dir).ensure(hostile, credentials=None, pinned_digest=None)
    with pytest.raises(InvalidReference):
        await make_cache(tools, work_dir).ensure("python:3.12", credentials=None, pinned_digest=hostile or "--all")
    assert tools.log.read_text() == ""


async def test_concurrent_ensures_of_one_reference_pull_once(
    registry: Registry, base: str, tools: Tools, work_dir: Path
) -> None:
    pushed = registry.push(base, "t/concurrent:v1")
    cache = make_cache(tools, work_dir, registry.address)
    images = await asyncio.gather(
        *(cache.ensure(f"{registry.address}/t/concurrent:v1", credentials=None, pinned_digest=None) for _ in range(4))
    )
    assert {image.digest for image in images} == {pushed}
    assert sorted(image.cached for image in images) == [False, True, True, True]
    assert len(tools.calls("podman", "pull")) == 1


def _silent_listener() -> tuple[socket.socket, str]:
    """A socket that accepts connections and never answers: a registry that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    return listener, f"127.0.0.1:{listener.getsockname()[1]}"


async def test_a_pull_that_hangs_times_out_as_pull_failed(tools: Tools, work_dir: Path) -> None:
    listener, address = _silent_listener()
    try:
        with pytest.raises(ImageError) as caught:
            await make_cache(tools, work_dir, address, pull_timeout=1.0).ensure(
                f"{address}/t/x:v1", credentials=None, pinned_digest=None
            )
    finally:
        listener.close()
    assert (caught.value.reason, caught.value.permanent) == ("ImagePullFailed", False)
    assert "did not finish within 1 s" in str(caught.value)
    _assert_gone(tools)


async def test_cancelling_ensure_kills_the_process_and_removes_the_authfile(tools: Tools, work_dir: Path) -> None:
    listener, address = _silent_listener()
    listener.setblocking(False)
    cache = make_cache(tools, work_dir, address)
    task = asyncio.create_task(cache.ensure(f"{address}/t/x:v1", credentials=Credentials("u", "p"), pinned_digest=None))
    try:
        connection, _ = await asyncio.get_running_loop().sock_accept(listener)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        connection.close()
    finally:
        listener.close()
    _assert_gone(tools)
    assert authfiles_left(work_dir) == []


def _assert_gone(tools: Tools) -> None:
    """Every wrapped process has exited (and been reaped: the wrapper's pid is the tool's, it execs)."""
    pids = [int(row[1]) for row in tools.calls("skopeo") + tools.calls("podman")]
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
