"""Node credentials: bearer tokens the API server issues to one Node's agent, and checks on every request.

A credential reads ``nodus-node.<payload>.<mac>``: the payload is base64url JSON naming the Node
(``name`` and ``uid``), when it was issued and when it expires (``iat``, ``exp``, seconds since the
epoch) and the key that signed it (``kid``); the MAC is HMAC-SHA256 over the payload under that key's
``node-credentials`` subkey (ADR 0035). Nothing is stored: every API server that holds the same secret
key file checks every credential, and a key added to the file signs new credentials while the old key
still checks the ones it signed.

A credential is good while all of these hold:

* its MAC verifies under a key the server still has, and it has not expired;
* its Node exists with the uid it names and is not being deleted: deleting the Node (or replacing it
  with another of the same name) revokes every credential issued to it. The Node is looked up through a
  cache that forgets after :data:`NODE_CACHE_SECONDS`, so a revocation takes effect within that time.

The agent asks for a fresh credential (authenticating with its current one) once half of its lifetime
has passed: credentials rotate without a restart and without a bootstrap token.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from hashlib import sha256
from typing import Any

import orjson

from nodus.api.auth.principal import AUTHENTICATED_GROUP, NODE_USER_PREFIX, NODES_GROUP, Principal
from nodus.apimachinery.sealing import Keyring

PREFIX = "nodus-node"
PURPOSE = "node-credentials"
DEFAULT_TTL = timedelta(hours=24)
MIN_TTL = timedelta(seconds=10)
NODE_CACHE_SECONDS = 2.0

NodeLookup = Callable[[str], Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True)
class Issued:
    token: str
    expires: float
    """Seconds since the epoch."""


class NodeCredentials:
    """Issues and checks node credentials with the server's keyring (None: the server issues none)."""

    def __init__(self, keyring: Keyring | None, lookup: NodeLookup, ttl: timedelta = DEFAULT_TTL) -> None:
        self._keys = keyring.derive(PURPOSE) if keyring is not None else None
        self._lookup = lookup
        self.ttl = ttl
        # name -> (monotonic time read, uid or None when absent or being deleted)
        self._nodes: dict[str, tuple[float, str | None]] = {}

    @property
    def enabled(self) -> bool:
        return self._keys is not None

    def issue(self, node: dict[str, Any], ttl: timedelta | None = None, now: float | None = None) -> Issued:
        """A credential for ``node`` (a stored Node object) that expires after ``ttl`` (default: the server's)."""
        assert self._keys is not None, "issue() needs a keyring (check enabled first)"
        issued = time.time() if now is None else now
        lifetime = min(max(ttl or self.ttl, MIN_TTL), self.ttl)
        expires = int(issued + lifetime.total_seconds())
        claims = {
            "name": str(node["metadata"]["name"]),
            "uid": str(node["metadata"]["uid"]),
            "iat": int(issued),
            "exp": expires,
            "kid": self._keys.active_id,
        }
        payload = _b64(orjson.dumps(claims, option=orjson.OPT_SORT_KEYS))
        return Issued(f"{PREFIX}.{payload}.{self._mac(self._keys.active_id, payload)}", float(expires))

    async def authenticate(self, token: str, now: float | None = None) -> Principal | None:
        """The node's principal when ``token`` is a good credential (see the module docstring), else None."""
        claims = self._claims(token, time.time() if now is None else now)
        if claims is None:
            return None
        name, uid = str(claims["name"]), str(claims["uid"])
        if await self._current_uid(name) != uid:
            return None
        return Principal(user=f"{NODE_USER_PREFIX}{name}", uid=uid, groups=(NODES_GROUP, AUTHENTICATED_GROUP))

    def forget(self, name: str) -> None:
        """Drop a cached Node (the caller just deleted or created it)."""
        self._nodes.pop(name, None)

    def _claims(self, token: str, now: float) -> dict[str, Any] | None:
        if self._keys is None or not token.startswith(PREFIX + "."):
            return None
        parts = token.split(".")
        if len(parts) != 3:
            return None
        _, payload, mac = parts
        try:
            claims = orjson.loads(_unb64(payload))
        except (ValueError, binascii.Error, orjson.JSONDecodeError):
            return None
        if not isinstance(claims, dict) or not all(k in claims for k in ("name", "uid", "exp", "kid")):
            return None
        expected = self._mac(str(claims["kid"]), payload)
        if expected is None or not hmac.compare_digest(expected, mac):
            return None
        if not isinstance(claims["exp"], int) or claims["exp"] <= now:
            return None
        return claims

    def _mac(self, key_id: str, payload: str) -> str | None:
        assert self._keys is not None
        key = self._keys.raw_key(key_id)
        if key is None:
            return None
        return _b64(hmac.new(key, payload.encode(), sha256).digest())

    async def _current_uid(self, name: str) -> str | None:
        cached = self._nodes.get(name)
        clock = time.monotonic()
        if cached is not None and clock - cached[0] < NODE_CACHE_SECONDS:
            return cached[1]
        node = await self._lookup(name)
        uid = None
        if node is not None and not node["metadata"].get("deletionTimestamp"):
            uid = str(node["metadata"]["uid"])
        self._nodes[name] = (clock, uid)
        return uid


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
