"""The host rule of ``spec.network.egress.policy: AllowList``: allow entries, presets and matching.

Shared by the API server (a Job's URL inputs and git source must name allowed hosts, ADR 0032) and
the agent (its egress proxy, and the fetches it makes on a Job's behalf), so that both apply one
rule. Pure: names in, answers out; nothing here resolves a name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Iterable

# Named host lists a Job can ask for instead of spelling the hosts out (spec.network.egress.presets).
PRESETS: dict[str, tuple[str, ...]] = {
    "python-packages": ("pypi.org", "files.pythonhosted.org", "*.pythonhosted.org"),
    "huggingface": ("huggingface.co", "*.huggingface.co", "*.hf.co", "cdn-lfs.huggingface.co"),
    "github": ("github.com", "*.github.com", "*.githubusercontent.com"),
    "conda": ("conda.anaconda.org", "repo.anaconda.com"),
    "apt": ("deb.debian.org", "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com"),
    "docker-hub": ("registry-1.docker.io", "auth.docker.io", "production.cloudflare.docker.com", "*.docker.io"),
    "npm": ("registry.npmjs.org", "*.npmjs.org"),
    "pytorch": ("download.pytorch.org", "*.pytorch.org"),
}
PRESET_NAMES = frozenset(PRESETS)

_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")


def allowed(host: str, allow: Iterable[str]) -> bool:
    """Whether ``host`` matches an entry of ``allow``: the same name, or below a ``*.suffix`` pattern.

    Case-insensitive, a trailing dot ignored; ``*.example.com`` matches ``a.example.com`` and
    ``a.b.example.com`` but not ``example.com``.
    """
    name = normal(host)
    if not name:
        return False
    for entry in allow:
        pattern = normal(entry)
        if pattern.startswith("*."):
            suffix = pattern[1:]
            prefix = name[: -len(suffix)]
            if name.endswith(suffix) and prefix and not prefix.startswith(".") and not prefix.endswith("."):
                return True
        elif name == pattern:
            return True
    return False


def is_valid_pattern(entry: str) -> bool:
    """Whether ``entry`` can be an allow entry: a host name, an IP address or ``*.`` and a host name."""
    name = normal(entry)
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(name)
        return True
    labels = name.removeprefix("*.").split(".")
    return all(_LABEL.fullmatch(label) for label in labels) and len(name) <= 253


def expand(allow: Iterable[str], presets: Iterable[str]) -> tuple[str, ...]:
    """The allow entries with the presets' hosts added; ValueError names an unknown preset."""
    entries = list(allow)
    for name in presets:
        if name not in PRESETS:
            raise ValueError(f"unknown egress preset {name!r}: use one of {', '.join(sorted(PRESET_NAMES))}")
        entries += PRESETS[name]
    return tuple(dict.fromkeys(entries))


def normal(name: str) -> str:
    """``name`` as compared: stripped, lower case, without a trailing dot."""
    return name.strip().lower().removesuffix(".")
