"""Admission of what the agent will connect to on a Job's behalf (ADR 0032).

The API server refuses, with a field error naming the field and the fix, every destination it can
see that the agent would refuse: Job URL inputs (``spec.inputs[].url.url``), git sources
(``spec.source.git.repo``; ``owner/name`` is github.com) and S3 Connection endpoints
(``spec.s3.endpoint``), checked with :mod:`nodus.apimachinery.destinations` against the policy the
server was started with (:func:`server_policy`: ``--allow-loopback-endpoints``, ``--forbid-address``,
the server's own database and listening addresses), which the Job and Connection strategies are given
when the server builds its registry.

The Job's egress governs these fetches as it governs the program:

* ``Deny``: no URL input, git source, bucket input or output sink (the agent would reach the network
  for each); uploaded blobs, Volumes and other Jobs' outputs come from the API server and stay allowed.
* ``AllowList``: a URL input's and a git source's host must be allowed (``allow`` or a preset). Bucket
  endpoints and sink databases live in Connections and Secrets, which may not exist yet (the Job
  waits for them) or change before admission pins them: the agent checks those at connect time.

Only on create: these fields are immutable, and re-checking a stored Job against a policy changed
since would refuse unrelated updates (a cancel) of a Job that was valid when created.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from nodus.api.kinds.job.jsonview import JSONObject, as_object, as_str, child, is_set, objects
from nodus.apimachinery import destinations, fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path

GITHUB = "https://github.com/{}"
_OWNER_NAME = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
SPEC = Path("spec")


def server_policy(allow_loopback: bool, forbid: Iterable[str], database_url: str) -> destinations.Policy:
    """The API server's policy: its flags plus its own database's endpoint (from ``database_url``).

    ``forbid`` holds ``--forbid-address`` entries and the listening address; names are also resolved
    now (blocking, at start), so that a Job naming one of their addresses is refused too. ValueError
    for a malformed entry.
    """
    entries = [destinations.Endpoint.parse(text) for text in forbid]
    with contextlib.suppress(ValueError):  # a URL without a TCP host (a unix socket) adds nothing
        parts = urlsplit(database_url)
        if parts.hostname:
            entries.append(destinations.Endpoint.parse(f"[{parts.hostname}]:{parts.port or 5432}"))
    resolved = list(entries)
    for entry in entries:
        if destinations.parse_address(entry.host) is None:
            with contextlib.suppress(OSError):
                for info in socket.getaddrinfo(entry.host, None, type=socket.SOCK_STREAM):
                    address = str(info[4][0]).partition("%")[0]
                    resolved.append(destinations.Endpoint(address, entry.port))
    return destinations.Policy(allow_loopback=allow_loopback, forbidden=frozenset(resolved))


def job_rules(obj: JSONObject, policy: destinations.Policy, path: Path = SPEC) -> list[FieldError]:
    """Every destination of a new Job that the agent would refuse under the server's ``policy``, and what the
    Job's egress policy forbids."""
    spec = as_object(obj.get("spec"))
    if spec is None:
        return []
    egress = child(spec, "network", "egress") or {}
    allow = [entry for entry in egress.get("allow") or [] if isinstance(entry, str)]
    presets = [entry for entry in egress.get("presets") or [] if isinstance(entry, str)]
    reach = policy.with_egress(as_str(egress.get("policy")) or "Open", allow, presets)
    errors: list[FieldError] = []
    for index, item in objects(spec.get("inputs")):
        item_path = path.child("inputs").index(index)
        url = as_str((child(item, "url") or {}).get("url"))
        if url is not None and url.startswith("https://"):
            errors += _url_rule(url, reach, item_path.child("url", "url"))
        if is_set(item, "bucket") and reach.egress == "Deny":
            errors.append(_denied(item_path.child("bucket"), "a bucket input is fetched by the agent over the network"))
    repo = as_str((child(spec, "source", "git") or {}).get("repo"))
    if repo is not None and (repo.startswith("https://") or _OWNER_NAME.fullmatch(repo)):  # else the model says
        url = repo if repo.startswith("https://") else GITHUB.format(repo)
        errors += _url_rule(url, reach, path.child("source", "git", "repo"))
    for index, item in objects(spec.get("outputs")):
        if is_set(item, "sink") and reach.egress == "Deny":
            sink_path = path.child("outputs").index(index).child("sink")
            errors.append(_denied(sink_path, "a sink is loaded by the agent into a database over the network"))
    return errors


def endpoint_rule(endpoint: str, policy: destinations.Policy, path: Path) -> list[FieldError]:
    """An S3 Connection's endpoint, which the agent reaches for bucket inputs, under the server's ``policy``."""
    return _url_rule(endpoint, policy, path)


def _url_rule(url: str, reach: destinations.Policy, path: Path) -> list[FieldError]:
    try:
        destinations.check_url(url, reach)
    except destinations.Refused as refused:
        return [fieldpath.invalid(path, destinations.redact_url(url), f"{refused}; {refused.fix}")]
    return []


def _denied(path: Path, why: str) -> FieldError:
    return fieldpath.forbidden(
        path,
        f"the Job's egress policy is Deny and {why}; set spec.network.egress.policy to AllowList (or Open), "
        "or remove it",
    )
