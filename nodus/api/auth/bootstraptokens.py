"""Bootstrap tokens as credentials: ``<id>.<secret>`` authenticates as ``system:bootstrap:<id>``.

The token is looked up by its id (a BootstrapToken object of that name, see
``nodus.api.kinds.bootstraptoken``) on every use: a deleted or expired token stops working at once.
A bootstrap principal may do one thing, exchange the token for a node credential; the authorizer
refuses it everything else (ADR 0035).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from nodus.api.auth.principal import AUTHENTICATED_GROUP, BOOTSTRAP_USER_PREFIX, BOOTSTRAPPERS_GROUP, Principal
from nodus.api.kinds import bootstraptoken
from nodus.apimachinery import units

TokenLookup = Callable[[str], Awaitable[dict[str, Any] | None]]


class BootstrapTokenAuthenticator:
    def __init__(self, lookup: TokenLookup) -> None:
        self._lookup = lookup

    async def authenticate(self, token: str) -> Principal | None:
        match = bootstraptoken.TOKEN_PATTERN.match(token)
        if match is None:
            return None
        token_id, secret = match.groups()
        obj = await self._lookup(token_id)
        if obj is None or obj["metadata"].get("deletionTimestamp") or not bootstraptoken.matches(obj, secret):
            return None
        expires = bootstraptoken.expiration(obj)
        if expires is None or expires <= units.now():
            return None
        return Principal(
            user=f"{BOOTSTRAP_USER_PREFIX}{token_id}",
            uid=str(obj["metadata"]["uid"]),
            groups=(BOOTSTRAPPERS_GROUP, AUTHENTICATED_GROUP),
        )
