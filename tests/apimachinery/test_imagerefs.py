"""Image references read as Docker reads them: normalised so one image has one spelling (ADR 0042)."""

from __future__ import annotations

import pytest

from nodus.apimachinery import imagerefs
from nodus.apimachinery.imagerefs import InvalidReference, parse

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("python", "docker.io", "library/python", "latest", None),
        ("python:3.12", "docker.io", "library/python", "3.12", None),
        ("pytorch/pytorch:2.3.0-cuda12.1", "docker.io", "pytorch/pytorch", "2.3.0-cuda12.1", None),
        ("index.docker.io/library/ubuntu:24.04", "docker.io", "library/ubuntu", "24.04", None),
        ("docker.io/ubuntu", "docker.io", "library/ubuntu", "latest", None),
        ("ghcr.io/acme/trainer:v4", "ghcr.io", "acme/trainer", "v4", None),
        ("localhost/nodus/base:dev", "localhost", "nodus/base", "dev", None),
        ("127.0.0.1:5000/nodus/base", "127.0.0.1:5000", "nodus/base", "latest", None),
        ("Registry.Example.com:443/a/b:c", "registry.example.com:443", "a/b", "c", None),
        (f"127.0.0.1:5000/nodus/base@{DIGEST}", "127.0.0.1:5000", "nodus/base", None, DIGEST),
        (f"python:3.12@{DIGEST}", "docker.io", "library/python", "3.12", DIGEST),
        ("[::1]:5000/x", "[::1]:5000", "x", "latest", None),
    ],
)
def test_references_are_normalised(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    reference = parse(text)
    assert (reference.registry, reference.repository, reference.tag, reference.digest) == (
        registry,
        repository,
        tag,
        digest,
    )


def test_pull_target_prefers_the_digest_and_pinning_drops_the_tag() -> None:
    reference = parse("python:3.12")
    assert reference.pull_target() == "docker.io/library/python:3.12"
    pinned = reference.pinned(DIGEST)
    assert pinned.pull_target() == f"docker.io/library/python@{DIGEST}"
    assert str(pinned) == f"docker.io/library/python@{DIGEST}"
    assert parse(str(pinned)) == pinned


def test_docker_hub_is_reached_at_its_registry_endpoint() -> None:
    assert parse("python").endpoint_host == "registry-1.docker.io"
    assert parse("127.0.0.1:5000/x").endpoint_host == "127.0.0.1"
    assert parse("127.0.0.1:5000/x").port == 5000
    assert parse("[::1]:5000/x").host == "::1"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        (" python", "surrounding spaces"),
        ("Python", "lower-case"),
        ("python:-bad", "tag"),
        ("python@sha256:abc", "digest"),
        ("python@md5:" + "a" * 32, "digest"),
        ("a//b", "lower-case"),
        ("ghcr.io/" + "a" * 300, "longer"),
        ("bad_host:5000:1/x", "registry host"),
    ],
)
def test_bad_references_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InvalidReference, match=says):
        parse(text)


def test_pinning_refuses_what_is_not_a_digest() -> None:
    with pytest.raises(InvalidReference, match="not a digest"):
        parse("python").pinned("latest")
    assert imagerefs.split_host_port("127.0.0.1") == ("127.0.0.1", None)
