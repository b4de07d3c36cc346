"""Container image references, read as Docker and every OCI registry client reads them (ADR 0042).

A Job names its image as a person writes it (``python:3.12``, ``ghcr.io/acme/trainer:v4``,
``127.0.0.1:5000/nodus/base@sha256:...``). :func:`parse` reads that text by the grammar of the
distribution project's ``reference`` package and normalises it, so that the agent pulls, and the Job
controller pins, one spelling of each image:

* a first path component is a registry only when it holds a ``.`` or a ``:`` or is ``localhost``;
  otherwise the registry is ``docker.io`` (``python:3.12`` is ``docker.io/library/python:3.12``);
* a one-component name on ``docker.io`` is under ``library/`` (the official images), and
  ``index.docker.io`` is ``docker.io``;
* neither tag nor digest means the tag ``latest``;
* a tag and a digest together (``name:tag@sha256:...``) pull the digest: the tag is kept only for display.

Shared by the agent (``nodus.agent.images``) and the controllers (``nodus.controllers.jobs``), which turn a
Job's reference into ``name@sha256:<digest>`` once the digest is known; pure, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

DOCKER_HUB = "docker.io"
# Where docker.io's registry API actually answers: the endpoint an agent connects to for it.
DOCKER_HUB_ENDPOINT = "registry-1.docker.io"
DEFAULT_TAG = "latest"
MAX_NAME_LENGTH = 255

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]{{1,5}})?")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class InvalidReference(ValueError):
    """The text is not an image reference; the message says what is wrong with it."""


@dataclass(frozen=True)
class Reference:
    """One image reference, normalised: ``registry/repository`` plus a tag, a digest, or both."""

    registry: str
    """``docker.io``, ``ghcr.io``, ``127.0.0.1:5000``: host and optional port, as written (lower-case)."""
    repository: str
    """The path within the registry: ``library/python``, ``acme/trainer``."""
    tag: str | None = None
    digest: str | None = None
    """``sha256:<64 hex>`` when the reference is pinned."""

    @property
    def name(self) -> str:
        """``registry/repository``, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def host(self) -> str:
        """The registry's host name or address, without port or IPv6 brackets."""
        host, _ = split_host_port(self.registry)
        return host

    @property
    def port(self) -> int | None:
        _, port = split_host_port(self.registry)
        return port

    @property
    def endpoint_host(self) -> str:
        """The host a client connects to for this registry (docker.io answers at registry-1.docker.io)."""
        return DOCKER_HUB_ENDPOINT if self.registry == DOCKER_HUB else self.host

    def pinned(self, digest: str) -> Reference:
        """This image at ``digest`` (tag dropped: the digest alone says what is pulled)."""
        if not DIGEST.fullmatch(digest):
            raise InvalidReference(f"{digest!r} is not a digest: sha256 followed by 64 lower-case hex characters")
        return replace(self, tag=None, digest=digest)

    def pull_target(self) -> str:
        """What a registry client is asked for: ``name@digest`` when pinned, else ``name:tag``."""
        if self.digest:
            return f"{self.name}@{self.digest}"
        return f"{self.name}:{self.tag or DEFAULT_TAG}"

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse(text: str) -> Reference:
    """``text`` read as an image reference and normalised (see the module docstring); InvalidReference."""
    if not isinstance(text, str) or not text or text != text.strip():
        raise InvalidReference(f"{text!r} is not an image reference: it is empty or has surrounding spaces")
    rest, digest = text, None
    if "@" in rest:
        rest, _, digest = rest.partition("@")
        if not DIGEST.fullmatch(digest):
            raise InvalidReference(
                f"{text!r}: the digest after @ must be sha256: followed by 64 lower-case hex characters"
            )
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, _, tag = rest.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise InvalidReference(
                f"{text!r}: the tag {tag!r} must be letters, digits, '_', '.' or '-' (at most 128, not starting "
                "with '.' or '-')"
            )
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, path = first, remainder
        if not _DOMAIN.fullmatch(registry):
            raise InvalidReference(f"{text!r}: {registry!r} is not a registry host[:port]")
        registry = registry.lower()
    else:
        registry, path = DOCKER_HUB, rest
    if registry == "index.docker.io":
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not _PATH.fullmatch(path):
        raise InvalidReference(
            f"{text!r}: the repository {path!r} must be lower-case letters, digits and separators ('.', '_', "
            "'__', '-') in components joined by '/'"
        )
    reference = Reference(registry, path, tag if tag or digest else DEFAULT_TAG, digest)
    if len(reference.name) > MAX_NAME_LENGTH:
        raise InvalidReference(f"{text!r}: the name is longer than {MAX_NAME_LENGTH} characters")
    return reference


def split_host_port(registry: str) -> tuple[str, int | None]:
    """``("127.0.0.1", 5000)`` from ``127.0.0.1:5000``, ``("::1", 5000)`` from ``[::1]:5000``."""
    if registry.startswith("["):
        inner, _, rest = registry[1:].partition("]")
        return inner, int(rest[1:]) if rest.startswith(":") else None
    host, colon, port = registry.partition(":")
    return host, int(port) if colon else None
