"""The agent's image cache on one host, over podman's own image store (ADR 0042 for image references).

:meth:`ImageCache.ensure` turns the image a Job names into a local image to run, and says which registry digest it is:

* A reference is read by :mod:`nodus.apimachinery.imagerefs` before anything runs, so option-looking or shell-looking
  text never reaches podman's command line; every podman and skopeo argument vector ends with ``--`` before it.
* Pinned (``pinned_digest``, or a digest in the reference): ``name@digest`` is pulled, never the tag, so a moved tag
  cannot change a replacement attempt. A local image holding ``name@digest`` is used with no registry traffic.
* Unpinned: the registry is always asked what the tag is now (``skopeo inspect --raw``, whose SHA-256 is the manifest
  digest the registry serves: what ``skopeo inspect`` reports as Digest), then ``name@digest`` is pulled. The digest is
  resolved first because podman's RepoDigests is names x digests of the local image: an image also known under another
  name (the same image pushed to two places, a manifest list and its instance) has several, and ``.Digest`` may be one
  the registry never served (measured: the base image pushed to a test registry got two RepoDigests per name).
* Errors are :class:`ImageError` with a status reason (nodus.apimachinery.statusreasons); only ImagePullFailed is
  retried, ``len(retry_delays) + 1`` times, and only it is not permanent. Messages name the image and the fix and
  carry no password or token.
* Credentials come only from the Job (:func:`credentials_from_secrets`), as a temporary ``--authfile`` (0600, in a
  private directory under ``work_dir``, removed after the pull, also on failure), never from the node: podman and skopeo
  read ``$HOME/.docker/config.json`` and ``$DOCKER_CONFIG`` even beside ``--authfile`` (measured), so they run with
  HOME and DOCKER_CONFIG pointing at an empty directory and with an empty authfile when the Job gives no credentials.
* Concurrent ``ensure`` calls for one name pull once (an asyncio lock per name); the whole of one ``ensure`` is
  bounded by ``pull_timeout``, and a podman or skopeo process is killed when ``ensure`` is cancelled or times out.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from nodus.apimachinery import imagerefs
from nodus.apis.v1 import statusreasons

__all__ = ["Credentials", "Image", "ImageCache", "ImageError", "credentials_from_secrets"]

PULL_TIMEOUT = 1800.0
RETRY_DELAYS = (1.0, 3.0)


PERMANENT_REASONS = frozenset({"ImageNotFound", "ImagePullUnauthorized", "ImageRegistryUntrusted"})

# What podman 4.3.1 and skopeo 1.9.3 print on stderr (skopeo as time=... level=fatal msg="..."), measured against the
# Debian docker-registry 2.8.2 (the tests provoke each), matched in this order on the message with the image's own
# name and tag cut out, so that a repository named "unauthorized" does not read as a refusal:
#   plain HTTP, TLS verified: pinging container registry H: Get "https://H/v2/": http: server gave HTTP response to
#     HTTPS client; a self-signed certificate: x509: cannot validate certificate for 127.0.0.1 because ...
#   no or wrong credentials: reading manifest v1 in H/p/base: unauthorized: authentication required
#   missing tag, repository or digest: reading manifest nope in H/t/base: manifest unknown: manifest unknown
#   closed port: dial tcp 127.0.0.1:1: connect: connection refused (podman retries it itself, 3 times, 1 s apart)
#   registry 5xx: pinging container registry H: invalid status code from registry 503 (Service Unavailable)
#   unknown host: dial tcp: lookup nonexistent.invalid on 10.255.255.53:53: no such host
_UNTRUSTED = re.compile(r"HTTP response to HTTPS client|x509|certificate", re.IGNORECASE)
_UNAUTHORIZED = re.compile(
    r"unauthorized|authentication required|access to the resource is denied|\b40[13] \((Unauthorized|Forbidden)\)",
    re.IGNORECASE,
)
_LOGGED = re.compile(r'^time="[^"]*" level=(?P<level>\w+) msg="(?P<msg>.*)"$')
_NOT_FOUND = re.compile(r"manifest unknown|name unknown|not found", re.IGNORECASE)


class ImageError(Exception):
    """An image could not be made ready. ``reason`` is a status reason code; ``permanent`` says that pulling the
    same reference again would fail the same way (every reason but ImagePullFailed). The message names the image,
    what went wrong and the fix, and never carries a credential."""

    def __init__(self, reason: str, image: str, detail: str) -> None:
        self.reason = reason
        self.permanent = reason in PERMANENT_REASONS
        self.image = image
        super().__init__(f"{image}: {detail}. {statusreasons.get(reason).fix}")


@dataclass(frozen=True)
class Credentials:
    """A user name and password for one pull; the password is never in a repr."""

    username: str
    password: str = field(repr=False)

    def basic(self) -> str:
        """``base64(username:password)``, the ``auth`` of an auth.json entry."""
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


_DOCKER_HUB_KEYS = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})


def credentials_from_secrets(secrets: list[dict[str, bytes]], registry: str) -> Credentials | None:
    """The credentials for ``registry`` (``imagerefs.Reference.registry``) from the data of the Job's imagePullSecrets,
    in order: the first Secret with a ``.dockerconfigjson`` entry for the registry, or with ``username`` and
    ``password`` keys, gives them. An entry's key may be ``host[:port]`` or a URL (``https://index.docker.io/v1/``);
    docker.io matches index.docker.io and registry-1.docker.io. A malformed ``.dockerconfigjson`` or ``auth`` raises
    ImageError (ImagePullUnauthorized) naming the problem, never the content."""
    for data in secrets:
        if ".dockerconfigjson" in data:
            found = _from_docker_config(data[".dockerconfigjson"], registry)
            if found is not None:
                return found
        if "username" in data and "password" in data:
            return _credentials(registry, data["username"], data["password"])
    return None


def _from_docker_config(raw: bytes, registry: str) -> Credentials | None:
    try:
        config = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise _bad_secret(registry, "the .dockerconfigjson of an imagePullSecret is not JSON") from None
    auths = config.get("auths") if isinstance(config, dict) else None
    if not isinstance(auths, dict):
        raise _bad_secret(registry, 'the .dockerconfigjson of an imagePullSecret has no "auths" object')
    wanted = "docker.io" if registry in _DOCKER_HUB_KEYS else registry.lower()
    for key, entry in auths.items():
        host = re.sub(r"^[a-z]+://", "", str(key).lower()).split("/", 1)[0]
        if ("docker.io" if host in _DOCKER_HUB_KEYS else host) != wanted:
            continue
        if not isinstance(entry, dict):
            raise _bad_secret(registry, f"the .dockerconfigjson entry for {wanted} is not an object")
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                decoded = base64.b64decode(entry["auth"], validate=True)
            except (binascii.Error, ValueError):
                raise _bad_secret(
                    registry, f"the auth of the .dockerconfigjson entry for {wanted} is not base64"
                ) from None
            username, colon, password = decoded.partition(b":")
            if not colon:
                raise _bad_secret(
                    registry, f"the auth of the .dockerconfigjson entry for {wanted} is not user:password"
                )
            return _credentials(registry, username, password)
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return _credentials(registry, entry["username"].encode(), entry["password"].encode())
        raise _bad_secret(registry, f"the .dockerconfigjson entry for {wanted} has neither auth nor username/password")
    return None


def _credentials(registry: str, username: bytes, password: bytes) -> Credentials:
    try:
        user, secret = username.decode(), password.decode()
    except UnicodeDecodeError:
        raise _bad_secret(registry, "an imagePullSecret's username or password is not UTF-8") from None
    if not user or ":" in user or any(ord(char) < 0x20 for char in user + secret):
        raise _bad_secret(registry, "an imagePullSecret's username is empty or holds ':' or a control character")
    return Credentials(user, secret)


def _bad_secret(registry: str, detail: str) -> ImageError:
    return ImageError("ImagePullUnauthorized", registry, detail)


def _classify(ref: imagerefs.Reference, stderr: str, credentials: Credentials | None) -> ImageError:
    """The ImageError for a failed podman or skopeo run, from its stderr (see the table above)."""
    lines: list[str] = []
    for line in stderr.splitlines():
        if logged := _LOGGED.match(line.strip()):
            if logged["level"] in ("fatal", "error"):
                lines.append(logged["msg"].replace('\\"', '"'))
        elif line.strip():
            lines.append(line.strip())
    detail = lines[-1] if lines else "podman failed without a message"
    detail = re.sub(r'^(Error: |Error parsing image name "[^"]*": )', "", detail)
    if credentials is not None:  # never printed by podman; cut out should a future version echo them
        for secret in (credentials.password, credentials.basic()):
            if secret:
                detail = detail.replace(secret, "***")
    detail = detail[-600:]
    # The image's own words cut out before matching, longest first.
    text = detail
    for own in (ref.pull_target(), ref.name, ref.repository):
        text = text.replace(own, "<image>")
    text = re.sub(r"reading manifest \S+ in", "reading manifest <ref> in", text)
    if _UNTRUSTED.search(text):
        return ImageError("ImageRegistryUntrusted", str(ref), detail)
    if _UNAUTHORIZED.search(text):
        hint = " (the Job gave no credentials for it)" if credentials is None else " (it refused the Job's credentials)"
        return ImageError("ImagePullUnauthorized", str(ref), detail + hint)
    if _NOT_FOUND.search(text):
        return ImageError("ImageNotFound", str(ref), detail)
    return ImageError("ImagePullFailed", str(ref), detail)


@dataclass(frozen=True)
class Image:
    """One image ready to run on this host, and what the registry calls it."""

    reference: str
    """The Job's reference, normalised (``docker.io/library/python:3.12``)."""
    digest: str
    """``sha256:...``: the manifest digest the registry serves for the reference; ``name@digest`` pulls it again."""
    pinned: str
    """``name@digest``."""
    image_id: str
    """podman's local image ID: what to run."""
    user: str
    env: dict[str, str]
    entrypoint: list[str]
    cmd: list[str]
    working_dir: str
    cached: bool
    """True when nothing was pulled (a warm start)."""
    pull_seconds: float


class ImageCache:
    """Images of this host's podman store, pulled on demand; see the module docstring for the contract."""

    def __init__(
        self,
        *,
        insecure_registries: Iterable[str] = (),
        podman: str = "podman",
        skopeo: str = "skopeo",
        work_dir: Path,
        pull_timeout: float = PULL_TIMEOUT,
        retry_delays: Sequence[float] = RETRY_DELAYS,
    ) -> None:
        self._insecure = frozenset(registry.lower() for registry in insecure_registries)
        self._podman = podman
        self._skopeo = skopeo
        self._work_dir = work_dir
        self._pull_timeout = pull_timeout
        self._retry_delays = tuple(retry_delays)
        self._locks: dict[str, asyncio.Lock] = {}
        # An empty home: neither tool may find a node's credentials there (see the module docstring).
        self._home = work_dir / "image-home"
        self._home.mkdir(mode=0o700, parents=True, exist_ok=True)

    async def ensure(self, reference: str, *, credentials: Credentials | None, pinned_digest: str | None) -> Image:
        """The image for ``reference`` on this host, pulled if needed: ``pinned_digest`` when given (it wins over a
        digest in the reference, which pins otherwise), else the digest the registry serves for the tag now. Raises
        :class:`ImageError`, or ``imagerefs.InvalidReference`` for a reference or digest that is not one (before any
        process runs)."""
        ref = imagerefs.parse(reference)
        if pinned_digest is not None:
            pinned = ref.pinned(pinned_digest)
        elif ref.digest:
            pinned = ref.pinned(ref.digest)
        else:
            pinned = None
        lock = self._locks.setdefault(ref.name, asyncio.Lock())
        async with lock:
            started = time.monotonic()
            try:
                async with asyncio.timeout(self._pull_timeout):
                    image = await self._ensure(ref, pinned, credentials)
            except TimeoutError:
                raise ImageError(
                    "ImagePullFailed", str(ref), f"the pull did not finish within {self._pull_timeout:g} s"
                ) from None
            return _with_time(image, time.monotonic() - started)

    async def _ensure(
        self, ref: imagerefs.Reference, pinned: imagerefs.Reference | None, credentials: Credentials | None
    ) -> Image:
        if pinned is not None and (local := await self._local(pinned)) is not None:
            return _image(ref, pinned, local, cached=True)
        for attempt in range(len(self._retry_delays) + 1):
            try:
                with self._authfile(ref, credentials) as authfile:
                    target = pinned or ref.pinned(await self._resolve(ref, authfile, credentials))
                    if (local := await self._local(target)) is not None:
                        return _image(ref, target, local, cached=True)
                    await self._podman_run(
                        ref,
                        credentials,
                        "pull",
                        "--quiet",
                        *self._tls(ref),
                        "--authfile",
                        str(authfile),
                        "--",
                        target.pull_target(),
                    )
                local = await self._local(target)
                if local is None:
                    raise ImageError("ImagePullFailed", str(ref), "podman pulled it but has no such local image")
                return _image(ref, target, local, cached=False)
            except ImageError as error:
                if error.permanent or attempt == len(self._retry_delays):
                    raise
                await asyncio.sleep(self._retry_delays[attempt])
        raise AssertionError("unreachable: the last try raises")

    async def _resolve(self, ref: imagerefs.Reference, authfile: Path, credentials: Credentials | None) -> str:
        """The digest the registry serves for ``ref``'s tag now: the SHA-256 of its manifest as served."""
        raw = await self._exec(
            ref,
            credentials,
            self._skopeo,
            "inspect",
            "--raw",
            *self._tls(ref),
            "--authfile",
            str(authfile),
            "--",
            f"docker://{ref.pull_target()}",
        )
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    async def _local(self, target: imagerefs.Reference) -> dict[str, object] | None:
        """podman's inspect of the local image holding ``name@digest``, or None: no registry traffic. podman finds an
        image by digest alone, whatever the name (measured), so its RepoDigests must name this repository too."""
        try:
            out = await self._podman_run(target, None, "image", "inspect", "--", target.pull_target())
        except ImageError:
            return None
        found = json.loads(out)
        if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
            return None
        inspected: dict[str, object] = found[0]
        repo_digests = inspected.get("RepoDigests")
        if not isinstance(repo_digests, list) or target.pull_target() not in repo_digests:
            return None
        return inspected

    def _tls(self, ref: imagerefs.Reference) -> list[str]:
        return ["--tls-verify=false"] if ref.registry in self._insecure else ["--tls-verify=true"]

    async def _podman_run(self, ref: imagerefs.Reference, credentials: Credentials | None, *args: str) -> bytes:
        return await self._exec(ref, credentials, self._podman, "--cgroup-manager=cgroupfs", *args)

    async def _exec(self, ref: imagerefs.Reference, credentials: Credentials | None, *argv: str) -> bytes:
        """Runs argv with the credential-free environment; stdout, or ImageError classified from stderr. The process
        is killed when the caller is cancelled (a timeout included)."""
        env = {key: value for key, value in os.environ.items() if key not in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG")}
        env["HOME"] = str(self._home)
        env["DOCKER_CONFIG"] = str(self._home / ".docker")
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await process.communicate()
        except BaseException:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise
        if process.returncode != 0:
            raise _classify(ref, err.decode(errors="replace"), credentials)
        return out  # whole: a manifest cut short would hash to another digest

    @contextmanager
    def _authfile(self, ref: imagerefs.Reference, credentials: Credentials | None) -> Iterator[Path]:
        """A private directory under work_dir holding an auth.json (0600) with the Job's credentials for ``ref``'s
        registry, or none: removed when the block ends, however it ends."""
        private = Path(tempfile.mkdtemp(prefix="pull-", dir=self._work_dir))
        try:
            path = private / "auth.json"
            auths = {ref.registry: {"auth": credentials.basic()}} if credentials is not None else {}
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump({"auths": auths}, handle)
            yield path
        finally:
            shutil.rmtree(private, ignore_errors=True)


def _image(
    ref: imagerefs.Reference, target: imagerefs.Reference, inspected: dict[str, object], *, cached: bool
) -> Image:
    config = inspected.get("Config")
    config = config if isinstance(config, dict) else {}
    env: dict[str, str] = {}
    for entry in config.get("Env") or []:
        key, _, value = str(entry).partition("=")
        env[key] = value
    digest = target.digest or ""
    return Image(
        reference=str(ref),
        digest=digest,
        pinned=f"{ref.name}@{digest}",
        image_id=str(inspected.get("Id") or ""),
        user=str(config.get("User") or ""),
        env=env,
        entrypoint=[str(part) for part in config.get("Entrypoint") or []],
        cmd=[str(part) for part in config.get("Cmd") or []],
        working_dir=str(config.get("WorkingDir") or ""),
        cached=cached,
        pull_seconds=0.0,
    )


def _with_time(image: Image, seconds: float) -> Image:
    return replace(image, pull_seconds=0.0 if image.cached else seconds)
