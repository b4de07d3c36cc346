"""The code an attempt runs: a git checkout, or an uploaded blob unpacked, before the program starts.

:func:`checkout_git` fetches one ref of a repository over HTTPS into an empty directory and checks it
out detached, returning the commit it resolved to (the Job's ``status.source.commit``). It runs the
``git`` CLI with a clean environment: no user or system configuration, no credential helpers, no
terminal prompts (a private repository without a token in its URL fails at once instead of hanging),
only the ``https`` protocol (submodules and redirects cannot switch to ``file://`` or ``ssh://``),
and ``ca_file`` as the only trusted CAs when given.

Only destinations the policy allows (ADR 0032): the repository's host is resolved and every address
checked before git runs (``nodus.agent.dialing``), and git's connections are pinned to those
addresses (``http.curloptResolve``, so curl never resolves the name itself: no DNS rebinding) and
follow no redirects (``http.followRedirects=false``: no hop to another host).

The fetch is as small as the server allows: a shallow fetch (``--depth 1``) of the ref, then a full
fetch of the ref if the server cannot do shallow (the dumb HTTP protocol cannot), then, for what may
be a commit sha that the server will not serve by name, a fetch of every branch and tag. ``ref`` is a
branch, a tag, a full commit sha or an abbreviated one (at least 7 hex digits), or None for the
remote's default branch. Failures raise :class:`SourceError` with git's last lines of stderr, with
any credentials in URLs replaced by ``***``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from nodus.agent import archives, dialing
from nodus.apimachinery import destinations
from nodus.apimachinery.destinations import Address

GITHUB = "https://github.com/{}.git"
STDERR_LINES = 5
_OWNER_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_FULL_SHA = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
_SHORT_SHA = re.compile(r"^[0-9a-f]{7,64}$")
_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
_ALL_REFS = ("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")


class SourceError(Exception):
    """The code could not be fetched or checked out; the message is safe to show to the Job's owner."""


async def checkout_git(
    repo: str,
    ref: str | None,
    destination: Path,
    *,
    policy: destinations.Policy,
    ca_file: str | None = None,
    timeout: float = 600,
) -> str:
    """Check out ``ref`` of ``repo`` into ``destination`` (missing or empty); return the commit sha.

    ``repo`` is ``owner/name`` (GitHub) or an ``https://`` URL, which may carry a token
    (``https://x-access-token:TOKEN@host/owner/name.git``). Everything, fetches included, must finish
    within ``timeout`` seconds. On failure ``destination`` may hold a partial repository. A host that
    ``policy`` refuses raises :class:`~nodus.apimachinery.destinations.Refused` before git runs.
    """
    url = repository_url(repo)
    if ref is not None and (not ref or ref.startswith("-") or any(c.isspace() or c in "\0:^~?*[\\" for c in ref)):
        raise SourceError(f"{ref!r} is not a branch, tag or commit")
    pins = await _pins(url, policy)
    _prepare(destination)
    with tempfile.TemporaryDirectory(prefix="nodus-git-home-") as home:
        git = _Git(destination, _environment(home, ca_file, pins))
        try:
            async with asyncio.timeout(timeout):
                await git.run("init", "--quiet")
                await git.run("remote", "add", "origin", url)
                target = await _fetch(git, ref, scrub(url))
                await git.run("checkout", "--quiet", "--detach", target)
                return (await git.run("rev-parse", "HEAD")).strip()
        except TimeoutError:
            raise SourceError(f"fetching {scrub(url)} took longer than {timeout:g} s") from None


async def unpack_blob(path: Path, media_type: str, destination: Path) -> None:
    """Unpack uploaded code (see :func:`nodus.agent.archives.unpack`) in a worker thread."""
    try:
        await asyncio.to_thread(archives.unpack, path, destination, media_type)
    except archives.ArchiveError as exc:
        raise SourceError(f"cannot unpack the uploaded code: {exc}") from None


def repository_url(repo: str) -> str:
    """``owner/name`` -> ``https://github.com/owner/name.git``; an ``https://`` URL as is; else SourceError."""
    if _OWNER_NAME.match(repo) and ".." not in repo:
        return GITHUB.format(repo)
    if repo.startswith("https://") and not any(c.isspace() for c in repo):
        return repo
    raise SourceError(f"{scrub(repo)!r} is not owner/name or an https:// URL")


def scrub(text: str) -> str:
    """``text`` with user info in URLs (``https://user:token@host``) replaced by ``***@``."""
    return _CREDENTIALS.sub("***@", text)


async def _fetch(git: _Git, ref: str | None, name: str) -> str:
    """Fetch ``ref`` and return what to check out."""
    wanted = ref or "HEAD"
    first: SourceError | None = None
    for shallow in (True, False):
        try:
            await git.run("fetch", "--quiet", "--no-tags", *(["--depth", "1"] if shallow else []), "origin", wanted)
            return "FETCH_HEAD^{commit}"
        except SourceError as exc:
            first = first or exc
    if ref is not None and _SHORT_SHA.match(ref):
        # A commit the server will not serve by name (or an abbreviated sha): fetch everything and look.
        await git.run("fetch", "--quiet", "origin", *_ALL_REFS)
        try:
            return (await git.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")).strip()
        except SourceError:
            raise SourceError(f"{name} has no branch, tag or commit {ref!r}") from None
    assert first is not None
    raise SourceError(f"fetching {wanted!r} from {name} failed: {first}") from None


def _prepare(destination: Path) -> None:
    if destination.exists() and any(destination.iterdir()):
        raise SourceError(f"{destination} is not empty")
    destination.mkdir(parents=True, exist_ok=True)


async def _pins(url: str, policy: destinations.Policy) -> list[str]:
    """``http.curloptResolve`` entries pinning the repository's host to its checked addresses."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or 443
    except ValueError:
        raise SourceError(f"{scrub(url)!r} has a malformed host or port") from None
    try:
        addresses = await dialing.resolve(host, port, policy)
    except OSError as exc:
        raise SourceError(str(exc)) from None
    if destinations.parse_address(host) is not None:
        return []  # an address: curl resolves nothing
    return [f"{host}:{port}:{','.join(_bracketed(a) for a in addresses)}"]


def _bracketed(address: Address) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def _environment(home: str, ca_file: str | None, pins: list[str]) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "true",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ALLOW_PROTOCOL": "https",
    }
    # Command-line configuration, without putting it on argv: no credential helpers, no redirects,
    # connections only to the checked addresses.
    config = [
        ("credential.helper", ""),
        ("advice.detachedHead", "false"),
        ("http.followRedirects", "false"),
        *(("http.curloptResolve", pin) for pin in pins),
    ]
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for number, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{number}"], env[f"GIT_CONFIG_VALUE_{number}"] = key, value
    if ca_file is not None:
        env["GIT_SSL_CAINFO"] = ca_file
    return env


class _Git:
    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory, self.env = directory, env
        self.binary = shutil.which("git", path=env["PATH"]) or "git"

    async def run(self, *args: str) -> str:
        """Run ``git ARGS`` in the directory; return stdout, or raise SourceError with stderr's last lines."""
        process = await asyncio.create_subprocess_exec(
            self.binary,
            *args,
            cwd=self.directory,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await process.communicate()
        except BaseException:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise
        if process.returncode != 0:
            lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
            detail = "; ".join(lines[-STDERR_LINES:]) or f"exit code {process.returncode}"
            raise SourceError(scrub(f"git {args[0]} failed: {detail}"))
        return out.decode("utf-8", "replace")
