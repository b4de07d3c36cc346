"""The agent's own identity: a node credential earned with a bootstrap token, kept private and rotated.

An agent never runs with a user's or an administrator's token (ADR 0035). At start it needs one of:

* its credential from an earlier run, in ``<work dir>/identity/credential`` (a restart of the agent on
  the same host), while it has more than :data:`RENEW_MARGIN` left; or
* a bootstrap token (``--join-token`` or ``--join-token-file``), which it exchanges through
  ``POST /apis/nodus.dev/v1/nodecredentials`` for a credential naming its Node (the server creates the
  Node if nobody did).

The credential is written to the identity directory (0700, the file 0600) and renewed, authenticating
with itself, once half of its lifetime has passed; the new one is used from the next request on. A
renewal the server refuses with 401 or 403 means the Node was deleted (or the host otherwise revoked):
the agent then stops its attempts and exits (``on_revoked``). Other failures are retried.

The work directory, and so the identity directory, is hidden from every sandbox, as are the join
token file and the kubeconfig the server's address may come from (``nodus.agent.contract``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from nodus.apimachinery import units
from nodus.client import Client, ClientConfig, errors

log = logging.getLogger("nodus.agent.identity")

PATH = "/apis/nodus.dev/v1/nodecredentials"
RENEW_MARGIN = 60.0
"""A stored credential with less than this many seconds left is not used at start."""
RETRY_SECONDS = 5.0


class IdentityError(Exception):
    """The agent cannot obtain a credential; the message says why and what to do."""


@dataclass
class Credential:
    token: str
    expires: float
    """Seconds since the epoch."""
    issued: float

    def renew_at(self) -> float:
        return self.issued + (self.expires - self.issued) / 2


class NodeIdentity:
    """Obtains, keeps and rotates the credential of node ``node_name`` that provides ``offering`` (None: a
    Pool's host, which names no offering: its join token says which pool it joins)."""

    def __init__(
        self,
        server: ClientConfig,
        node_name: str,
        offering: str | None,
        work_dir: Path,
        join_token: str | None,
        lifetime: timedelta | None = None,
    ) -> None:
        """``lifetime`` asks for credentials that short (the server caps it at its own); None: the server's."""
        self._server = server
        self._lifetime = lifetime
        self.node_name = node_name
        self.offering = offering
        self.directory = work_dir / "identity"
        self._join_token = join_token
        self.credential: Credential | None = None

    @property
    def file(self) -> Path:
        return self.directory / "credential"

    def config(self) -> ClientConfig:
        """The client configuration with the current credential (call :meth:`obtain` first)."""
        assert self.credential is not None
        return ClientConfig(server=self._server.server, token=self.credential.token, ca_file=self._server.ca_file)

    async def obtain(self) -> Credential:
        """The stored credential if it is good for a while, else one exchanged for the join token."""
        stored = self._load()
        if stored is not None and stored.expires - time.time() > RENEW_MARGIN:
            self.credential = stored
            return stored
        if not self._join_token:
            raise IdentityError(
                f"node {self.node_name} has no usable credential in {self.file} and no join token: create one "
                f"(nodus nodes join-token --node-name {self.node_name}) and pass --join-token or --join-token-file"
            )
        anonymous = ClientConfig(server=self._server.server, token=self._join_token, ca_file=self._server.ca_file)
        async with Client(anonymous, user_agent=f"nodus-agent/{self.node_name}") as client:
            credential = await self._exchange(client, with_offering=True)
        self._join_token = None  # used: it is not kept in memory beyond the exchange
        return credential

    async def rotate_forever(self, client: Client, on_revoked: Callable[[str], None]) -> None:
        """Renew the credential halfway through each lifetime, for as long as the agent runs."""
        while True:
            assert self.credential is not None
            await asyncio.sleep(max(self.credential.renew_at() - time.time(), 1.0))
            try:
                await self._exchange(client, with_offering=False)
            except (errors.Unauthorized, errors.Forbidden, errors.Conflict) as exc:
                on_revoked(f"the node credential could not be renewed: {exc}")
                return
            except (errors.APIError, httpx.HTTPError) as exc:
                log.warning("renewing the node credential failed (retrying in %.0f s): %s", RETRY_SECONDS, exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            client.set_token(self.credential.token)
            log.info("node credential renewed; it expires at %s", _when(self.credential.expires))

    async def _exchange(self, client: Client, with_offering: bool) -> Credential:
        spec: dict[str, Any] = {"nodeName": self.node_name}
        if self._lifetime is not None:
            spec["expirationSeconds"] = int(self._lifetime.total_seconds())
        if with_offering and self.offering:
            spec["offering"] = self.offering
        body = {"apiVersion": "nodus.dev/v1", "kind": "NodeCredentialRequest", "spec": spec}
        response = await client.request("POST", PATH, json=body)
        status = response.json().get("status") or {}
        expires = units.parse_time(str(status["expirationTimestamp"])).timestamp()
        credential = Credential(token=str(status["token"]), expires=expires, issued=time.time())
        self._store(credential)
        self.credential = credential
        return credential

    def _load(self) -> Credential | None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            document = orjson.loads(self.file.read_bytes())
            return Credential(str(document["token"]), float(document["expires"]), float(document["issued"]))
        return None

    def _store(self, credential: Credential) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        body = orjson.dumps({"token": credential.token, "expires": credential.expires, "issued": credential.issued})
        partial = self.directory / "credential.partial"
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
        os.replace(partial, self.file)


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
