"""Code checkout from a real git repository served over HTTPS (dumb protocol) with a test CA.

The server is on this machine's loopback: most tests run with the policy of an agent started with
``--allow-loopback-endpoints``, the destination tests without it too (ADR 0032).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodus.agent import archives, source
from nodus.apimachinery import destinations
from tests.agent.support_https import HttpsServer

# An agent started with --allow-loopback-endpoints (its API server elsewhere).
LOCAL = destinations.Policy(allow_loopback=True)
GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


@dataclass
class Repository:
    url: str
    ca_file: str
    first: str  # the commit tagged v1
    second: str  # the head of main


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Repository]:
    work = tmp_path_factory.mktemp("work")
    git(work, "init", "--quiet", "--initial-branch=main")
    (work / "train.py").write_text("print('v1')\n")
    (work / "README.md").write_text("hello\n")
    git(work, "add", ".")
    git(work, "commit", "--quiet", "-m", "first")
    git(work, "tag", "-a", "v1", "-m", "version 1")
    first = git(work, "rev-parse", "HEAD").strip()
    (work / "train.py").write_text("print('v2')\n")
    git(work, "commit", "--quiet", "-am", "second")
    second = git(work, "rev-parse", "HEAD").strip()
    served = tmp_path_factory.mktemp("served")
    git(served, "clone", "--quiet", "--bare", str(work), "repo.git")
    git(served / "repo.git", "update-server-info")
    with HttpsServer(served, tmp_path_factory.mktemp("certs")) as server:
        # The same repository under another host name (127.0.0.1, which the certificate also names).
        port = server.url.rsplit(":", 1)[1]
        refs = "/info/refs?service=git-upload-pack"
        server.redirects[f"/elsewhere.git{refs}"] = f"https://127.0.0.1:{port}/repo.git{refs}"
        yield Repository(f"{server.url}/repo.git", str(server.ca_file), first, second)


@pytest.mark.parametrize(
    ("ref", "expected", "content"),
    [
        pytest.param(None, "second", "print('v2')\n", id="default-branch"),
        pytest.param("main", "second", "print('v2')\n", id="branch"),
        pytest.param("v1", "first", "print('v1')\n", id="tag"),
        pytest.param("first", "first", "print('v1')\n", id="full-sha"),
        pytest.param("first[:10]", "first", "print('v1')\n", id="short-sha"),
    ],
)
async def test_checkout(repository: Repository, tmp_path: Path, ref: str | None, expected: str, content: str) -> None:
    if ref == "first":
        ref = repository.first
    elif ref == "first[:10]":
        ref = repository.first[:10]
    commit = await source.checkout_git(repository.url, ref, tmp_path / "code", policy=LOCAL, ca_file=repository.ca_file)
    assert commit == getattr(repository, expected)
    assert (tmp_path / "code" / "train.py").read_text() == content
    assert git(tmp_path / "code", "status", "--porcelain") == ""


async def test_a_missing_ref_is_a_clear_error(repository: Repository, tmp_path: Path) -> None:
    with pytest.raises(source.SourceError, match=r"fetching 'nope' from .*repo\.git failed: git fetch failed: .*nope"):
        await source.checkout_git(repository.url, "nope", tmp_path / "code", policy=LOCAL, ca_file=repository.ca_file)


async def test_a_missing_commit_is_a_clear_error(repository: Repository, tmp_path: Path) -> None:
    with pytest.raises(source.SourceError, match="has no branch, tag or commit 'deadbeef00'"):
        await source.checkout_git(
            repository.url, "deadbeef00", tmp_path / "code", policy=LOCAL, ca_file=repository.ca_file
        )


async def test_an_untrusted_server_fails_without_leaking_the_token(repository: Repository, tmp_path: Path) -> None:
    url = repository.url.replace("https://", "https://x-access-token:s3cret@")
    with pytest.raises(source.SourceError) as caught:
        await source.checkout_git(
            url, "main", tmp_path / "code", policy=LOCAL
        )  # the system CAs do not know the test CA
    assert "s3cret" not in str(caught.value)
    assert "***@" in str(caught.value)


@pytest.mark.parametrize(
    "repo",
    ["http://example.com/a.git", "git@github.com:a/b.git", "file:///etc", "ssh://host/x", "../x", "a/b/c"],
)
async def test_only_https_or_owner_name(repo: str, tmp_path: Path) -> None:
    with pytest.raises(source.SourceError, match="is not owner/name or an https:// URL"):
        await source.checkout_git(repo, None, tmp_path / "code", policy=LOCAL)


def test_owner_name_means_github() -> None:
    assert source.repository_url("nodus-dev/examples") == "https://github.com/nodus-dev/examples.git"


@pytest.mark.parametrize("ref", ["--upload-pack=evil", "a b", "a:b", ""])
async def test_refs_that_are_not_refs_are_refused(repository: Repository, ref: str, tmp_path: Path) -> None:
    with pytest.raises(source.SourceError, match="is not a branch, tag or commit"):
        await source.checkout_git(repository.url, ref, tmp_path / "code", policy=LOCAL, ca_file=repository.ca_file)


# --- Destinations (ADR 0032)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        pytest.param(destinations.Policy(), r"^localhost is loopback \(this host\): refused$", id="loopback"),
        pytest.param(LOCAL.with_egress("Deny"), "egress policy is Deny", id="egress-deny"),
        pytest.param(LOCAL.with_egress("AllowList", [], ["github"]), "not in the Job's egress allow list", id="allow"),
    ],
)
async def test_a_refused_repository_host_is_never_fetched(
    repository: Repository, tmp_path: Path, policy: destinations.Policy, message: str
) -> None:
    with pytest.raises(destinations.Refused, match=message):
        await source.checkout_git(repository.url, "main", tmp_path / "code", policy=policy, ca_file=repository.ca_file)
    assert not (tmp_path / "code").exists()


@pytest.mark.parametrize(
    "repo",
    [
        pytest.param("https://169.254.169.254/latest/meta-data.git", id="metadata-service"),
        pytest.param("https://0x7f.1/repo.git", id="hex-loopback"),
        pytest.param("https://[::ffff:127.0.0.1]/repo.git", id="mapped-loopback"),
    ],
)
async def test_a_literal_refused_address_is_refused_before_git_runs(repo: str, tmp_path: Path) -> None:
    with pytest.raises(destinations.Refused, match="refused"):
        await source.checkout_git(repo, "main", tmp_path / "code", policy=destinations.Policy())
    assert not (tmp_path / "code").exists()


async def test_git_follows_no_redirect_to_another_host(repository: Repository, tmp_path: Path) -> None:
    # localhost answers with a redirect to 127.0.0.1: an address nobody checked for this fetch.
    url = repository.url.replace("/repo.git", "/elsewhere.git")
    with pytest.raises(source.SourceError, match="returned error: 302"):
        await source.checkout_git(url, "main", tmp_path / "code", policy=LOCAL, ca_file=repository.ca_file)


async def test_unpack_blob(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print(1)\n")
    archives.pack_to_file(tmp_path / "src", tmp_path / "code.tar.zst")
    await source.unpack_blob(tmp_path / "code.tar.zst", archives.TAR_ZSTD, tmp_path / "out")
    assert (tmp_path / "out" / "main.py").read_text() == "print(1)\n"
