"""The web console's sessions: one-time login codes, cookies, CSRF tokens, logout and expiry (ADR 0053).

A person reaches the console in one of two ways, both ending in a session:

* a **login code**: ``nodus console`` (or ``nodus dev`` at start) asks the API server, with a credential
  that is not a session cookie, for a code that logs in as that same principal. A code is 32 random bytes
  (URL-safe), valid :data:`CODE_LIFETIME`, and single use: redeeming deletes its row, and of two
  concurrent redeems exactly one wins (``nodus.storage.consolesessions.take_code``);
* a **token**: the login form takes a bearer token, authenticated exactly as the ``Authorization``
  header would be (static tokens; node credentials and bootstrap tokens are refused).

A session is a cookie value of 32 random bytes (URL-safe) and a server-side row keyed by its SHA-256:
the row holds the principal as it was authenticated at login, a CSRF token and an expiry
(:data:`SESSION_LIFETIME` after login, never extended). Only hashes of cookies and codes reach the
database. Logging out deletes the row, so the old cookie is refused at once by every API server.

A request authenticated by the cookie with a method that may change something (anything but GET, HEAD
and OPTIONS) must carry the session's CSRF token in ``X-CSRF-Token`` (:meth:`ConsoleSessions.check_csrf`);
the cookie is also ``SameSite=Strict``, so the token is the second of two defences.

Expired rows are deleted by :meth:`ConsoleSessions.sweep`, which every API server runs on a timer
(:data:`SWEEP_INTERVAL`); an expired row is refused whether or not it has been swept yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError
from nodus.storage import consolesessions as rows
from nodus.storage.objects import Storage

log = logging.getLogger(__name__)

COOKIE = "nodus-session"
CSRF_HEADER = "X-CSRF-Token"
SESSION_LIFETIME = timedelta(hours=12)
CODE_LIFETIME = timedelta(minutes=5)
SWEEP_INTERVAL = 600.0
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# token_urlsafe(32) is 43 characters; anything much longer is not one of ours and is not hashed.
_MAX_SECRET_CHARS = 128
NEW_CODE = "Run `nodus console` for a new one-time link (or log in with your token at /console/login)."

Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    """A live session: who it authenticates and the token its unsafe requests must carry."""

    principal: Principal
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True)
class NewSession:
    """A session just created: ``cookie`` is the value to set, never stored or shown again."""

    cookie: str
    session: Session


@dataclass(frozen=True)
class LoginCode:
    code: str
    expires_at: datetime


def refuse_system_identity(principal: Principal) -> None:
    """403 for the identities the API server mints for machines: they never use the console."""
    if principal.node_name is not None or principal.bootstrap_token is not None:
        raise APIError(
            "Forbidden",
            f'forbidden: User "{principal.user}" cannot use the web console: node credentials and bootstrap '
            "tokens authenticate machines, not people",
            fix="Use a person's token (the kubeconfig `nodus dev` writes, or a token from the server's token file).",
        )


def _stored(principal: Principal) -> rows.StoredPrincipal:
    return rows.StoredPrincipal(principal.user, principal.uid, principal.groups, dict(principal.extra))


def _principal(stored: rows.StoredPrincipal) -> Principal:
    return Principal(stored.user, stored.uid, stored.groups, dict(stored.extra))


class ConsoleSessions:
    """Issues, redeems, checks and ends console sessions; the clock is injected (tests set it)."""

    def __init__(
        self,
        storage: Storage,
        clock: Clock = _now,
        session_lifetime: timedelta = SESSION_LIFETIME,
        code_lifetime: timedelta = CODE_LIFETIME,
    ) -> None:
        self._storage = storage
        self._clock = clock
        self.session_lifetime = session_lifetime
        self.code_lifetime = code_lifetime
        self._sweeper: asyncio.Task[None] | None = None

    async def issue_code(self, principal: Principal) -> LoginCode:
        """A new single-use code that logs in as ``principal`` (403 for node and bootstrap identities)."""
        refuse_system_identity(principal)
        code = secrets.token_urlsafe(32)
        now = self._clock()
        expires = now + self.code_lifetime
        await rows.insert_code(self._storage, _digest(code), _stored(principal), now, expires)
        return LoginCode(code, expires)

    async def redeem(self, code: str) -> NewSession:
        """Spend ``code`` for a new session; 401 when it is unknown, already used or expired."""
        taken = await rows.take_code(self._storage, _digest(code)) if 0 < len(code) <= _MAX_SECRET_CHARS else None
        if taken is None:
            raise APIError(
                "Unauthorized", "this login link is not valid: it was used already or never issued", fix=NEW_CODE
            )
        if taken.expires_at <= self._clock():
            minutes = int(self.code_lifetime.total_seconds() // 60)
            raise APIError(
                "Unauthorized", f"this login link has expired: links are valid {minutes} minutes", fix=NEW_CODE
            )
        return await self._create(_principal(taken.principal))

    async def log_in(self, principal: Principal) -> NewSession:
        """A new session for a principal the caller authenticated (by a token from the login form)."""
        refuse_system_identity(principal)
        return await self._create(principal)

    async def _create(self, principal: Principal) -> NewSession:
        cookie = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        now = self._clock()
        expires = now + self.session_lifetime
        await rows.insert_session(self._storage, _digest(cookie), _stored(principal), csrf, now, expires)
        return NewSession(cookie, Session(principal, csrf, expires))

    async def authenticate(self, cookie: str) -> Session | None:
        """The live session this cookie value names (None: none, logged out or expired)."""
        if not 0 < len(cookie) <= _MAX_SECRET_CHARS:
            return None
        row = await rows.live_session(self._storage, _digest(cookie), self._clock())
        if row is None:
            return None
        return Session(_principal(row.principal), row.csrf_token, row.expires_at)

    @staticmethod
    def check_csrf(session: Session, method: str, presented: str | None) -> None:
        """403 unless ``method`` is safe or ``presented`` is the session's CSRF token."""
        if method.upper() in SAFE_METHODS:
            return
        if presented is not None and hmac.compare_digest(presented.encode(), session.csrf_token.encode()):
            return
        told = "a wrong" if presented else "no"
        raise APIError(
            "Forbidden",
            f"forbidden: a {method.upper()} authenticated by the console's session cookie carried {told} "
            f"{CSRF_HEADER} header; nothing was changed",
            fix=f"Send the header {CSRF_HEADER} with the csrfToken that GET /console/api/session returns (the console "
            "does this itself; reload the page), or authenticate with Authorization: Bearer <token> instead.",
        )

    async def log_out(self, cookie: str) -> bool:
        """End the session this cookie names; whether there was one."""
        if not 0 < len(cookie) <= _MAX_SECRET_CHARS:
            return False
        return await rows.delete_session(self._storage, _digest(cookie))

    async def sweep(self) -> tuple[int, int]:
        """Delete expired sessions and codes: (sessions, codes) deleted."""
        return await rows.delete_expired(self._storage, self._clock())

    def start(self, interval: float = SWEEP_INTERVAL) -> None:
        """Sweep every ``interval`` seconds until :meth:`stop`."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(interval), name="console-sweep")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _sweep_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                sessions, codes = await self.sweep()
            except Exception:  # the database may be away for a while: the next sweep tries again
                log.warning("sweeping expired console sessions failed", exc_info=True)
                continue
            if sessions or codes:
                log.info("deleted %d expired console sessions and %d expired login codes", sessions, codes)
