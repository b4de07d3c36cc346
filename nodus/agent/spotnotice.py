"""Spot interruption notices: the agent of an EC2 host reads the instance metadata and reports a notice on its Node.

EC2 announces that it reclaims a spot instance two minutes ahead, in the instance metadata: ``GET
<metadata-url>/latest/meta-data/spot/instance-action`` answers 404 until then, and then ``{"action":
"terminate", "time": "2026-11-02T08:22:00Z"}`` (or ``stop``, ``hibernate``). Reads use IMDSv2: a session token
from ``PUT /latest/api/token``, sent with every read (instances are started with tokens required), renewed
before it expires and whenever a read is refused with 401.

The agent polls every few seconds (``nodus agent --metadata-url``) and reports a notice, once per distinct
notice, as its Node's ``status.preemptionNotice`` (the one thing it may write is its own Node's status). The hosts
controller turns it into the preemption path the simulated cloud already uses (ADR 0049): the Node turns
``Terminating`` (``Preempted``) with the notice's time as its deadline (``nodus.dev/terminate-at``), and the agent
checkpoints and stops its attempts before it. A metadata service that cannot be reached is logged and polled
again: a missed notice costs only the checkpoint; the attempt is lost with the host and recovers all the same.

:func:`read_notice` is the decision (an HTTP answer in, a notice or none out); :func:`watch` the loop around it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from nodus.apimachinery import units

log = logging.getLogger("nodus.agent.spotnotice")

TOKEN_PATH = "/latest/api/token"
NOTICE_PATH = "/latest/meta-data/spot/instance-action"
TOKEN_TTL = 21600  # seconds: IMDSv2's longest
POLL_INTERVAL = 5.0
SOURCE = "aws-spot"


@dataclass(frozen=True)
class Notice:
    """A notice as reported on the Node (``status.preemptionNotice``)."""

    action: str
    time: str

    def wire(self, noticed: str) -> dict[str, str]:
        return {"action": self.action, "time": self.time, "source": SOURCE, "noticeTime": noticed}


class MetadataError(Exception):
    """The metadata service answered something that is not a notice nor its absence."""


def read_notice(status: int, body: bytes) -> Notice | None:
    """The notice in an answer of ``GET .../spot/instance-action``: None for 404 (no notice); raises
    :class:`MetadataError` for any other answer that is not a notice with an action and an RFC 3339 time."""
    if status == 404:
        return None
    if status != 200:
        raise MetadataError(f"the metadata service answered {status}")
    try:
        data = json.loads(body)
        action, when = str(data["action"]), str(data["time"])
        at = units.parse_time(when)
    except (ValueError, KeyError, TypeError) as exc:
        raise MetadataError(f"not a spot instance-action notice: {body[:200]!r}") from exc
    return Notice(action, units.format_time(at))


class MetadataClient:
    """IMDSv2 reads of one instance's metadata (a session token, renewed before it expires or when refused)."""

    def __init__(self, base_url: str, client: httpx.AsyncClient) -> None:
        self._base = base_url.rstrip("/")
        self._client = client
        self._token: str | None = None
        self._expires = 0.0

    async def _session(self) -> str:
        if self._token is None or time.monotonic() > self._expires:
            answer = await self._client.put(
                self._base + TOKEN_PATH, headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL)}
            )
            answer.raise_for_status()
            self._token = answer.text.strip()
            self._expires = time.monotonic() + TOKEN_TTL / 2
        return self._token

    async def notice(self) -> Notice | None:
        for _ in range(2):
            answer = await self._client.get(
                self._base + NOTICE_PATH, headers={"X-aws-ec2-metadata-token": await self._session()}
            )
            if answer.status_code == 401:
                self._token = None  # expired early (the instance's clock, a restart of the service): a new one
                continue
            return read_notice(answer.status_code, answer.content)
        raise MetadataError("the metadata service refused two fresh session tokens")


async def watch(
    metadata_url: str, report: Callable[[dict[str, str]], Awaitable[None]], interval: float = POLL_INTERVAL
) -> None:
    """Poll the metadata service every ``interval`` seconds until cancelled; ``report`` each new notice (as the
    ``status.preemptionNotice`` to write), again until a report succeeds."""
    reported: Notice | None = None
    # Never through a proxy: the metadata service is link-local and only the instance may read it.
    async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
        metadata = MetadataClient(metadata_url, client)
        while True:
            try:
                notice = await metadata.notice()
                if notice is not None and notice != reported:
                    log.warning("the provider reclaims this host: %s at %s", notice.action, notice.time)
                    await report(notice.wire(units.format_time(units.now())))
                    reported = notice
            except (httpx.HTTPError, MetadataError) as exc:
                log.warning("reading the instance metadata at %s failed: %s", metadata_url, exc)
            except Exception as exc:  # the report: the API server unreachable or refusing; the next poll retries
                log.warning("reporting the spot interruption notice failed: %s", exc)
            await asyncio.sleep(interval)
