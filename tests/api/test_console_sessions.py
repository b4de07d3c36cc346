"""The console's session service on the real PostgreSQL, with a clock the tests move: codes expire after five
minutes and log in once (also when redeemed concurrently), sessions after twelve hours, only hashes are
stored, machine identities are refused, CSRF is decided by method and token, and the sweep deletes exactly
what expired."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from nodus.api.auth.principal import BOOTSTRAPPERS_GROUP, NODES_GROUP, Principal
from nodus.api.consolesessions import CODE_LIFETIME, SESSION_LIFETIME, ConsoleSessions, Session
from nodus.api.errors import APIError
from nodus.storage import database
from nodus.storage.objects import Storage

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
ALICE = Principal("alice", "alice-uid", ("developers", "system:authenticated"), {"scopes": ("a", "b")})


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    store = Storage(database_url, pool_size=12, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sessions(storage: Storage, clock: Clock) -> ConsoleSessions:
    return ConsoleSessions(storage, clock)


async def stored_text(database_url: str) -> str:
    """Every row of both tables as text."""
    conn = await asyncpg.connect(database.asyncpg_dsn(database_url))
    try:
        rows = await conn.fetch(
            "SELECT s::text FROM console_sessions s UNION ALL SELECT c::text FROM console_login_codes c"
        )
    finally:
        await conn.close()
    return "\n".join(r[0] for r in rows)


async def test_a_code_logs_in_as_its_principal_once(sessions: ConsoleSessions, clock: Clock) -> None:
    code = await sessions.issue_code(ALICE)
    assert code.expires_at == T0 + CODE_LIFETIME
    new = await sessions.redeem(code.code)
    assert new.session.principal == ALICE
    assert new.session.expires_at == T0 + SESSION_LIFETIME
    with pytest.raises(APIError) as again:
        await sessions.redeem(code.code)
    assert again.value.code == 401 and "nodus console" in again.value.fix
    found = await sessions.authenticate(new.cookie)
    assert found == new.session


@pytest.mark.parametrize(
    ("after", "works"),
    [
        pytest.param(CODE_LIFETIME - timedelta(seconds=1), True, id="just-before"),
        pytest.param(CODE_LIFETIME, False, id="at-expiry"),
        pytest.param(CODE_LIFETIME + timedelta(hours=1), False, id="long-after"),
    ],
)
async def test_a_code_expires_after_five_minutes(
    sessions: ConsoleSessions, clock: Clock, after: timedelta, works: bool
) -> None:
    code = await sessions.issue_code(ALICE)
    clock.now = T0 + after
    if works:
        assert (await sessions.redeem(code.code)).session.principal == ALICE
        return
    with pytest.raises(APIError) as expired:
        await sessions.redeem(code.code)
    assert expired.value.code == 401 and "expired" in expired.value.message


async def test_concurrent_redeems_of_one_code_make_one_session(sessions: ConsoleSessions) -> None:
    code = await sessions.issue_code(ALICE)
    results = await asyncio.gather(*(sessions.redeem(code.code) for _ in range(10)), return_exceptions=True)
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, APIError) and r.code == 401]
    assert len(won) == 1 and len(lost) == 9


@pytest.mark.parametrize(
    ("after", "live"),
    [
        pytest.param(SESSION_LIFETIME - timedelta(seconds=1), True, id="just-before"),
        pytest.param(SESSION_LIFETIME, False, id="at-expiry"),
    ],
)
async def test_a_session_expires_after_twelve_hours(
    sessions: ConsoleSessions, clock: Clock, after: timedelta, live: bool
) -> None:
    new = await sessions.log_in(ALICE)
    clock.now = T0 + after
    assert (await sessions.authenticate(new.cookie) is not None) is live


async def test_only_hashes_of_cookies_and_codes_are_stored(sessions: ConsoleSessions, database_url: str) -> None:
    code = await sessions.issue_code(ALICE)
    new = await sessions.log_in(ALICE)
    text = await stored_text(database_url)
    assert code.code not in text and new.cookie not in text
    assert hashlib.sha256(code.code.encode()).hexdigest() in text
    assert hashlib.sha256(new.cookie.encode()).hexdigest() in text


async def test_logout_ends_the_session(sessions: ConsoleSessions) -> None:
    new = await sessions.log_in(ALICE)
    other = await sessions.log_in(ALICE)
    assert await sessions.log_out(new.cookie) is True
    assert await sessions.authenticate(new.cookie) is None
    assert await sessions.log_out(new.cookie) is False
    assert await sessions.authenticate(other.cookie) is not None


@pytest.mark.parametrize("cookie", ["", "x", "A" * 43, "A" * 5000, "\x00", "'; DROP TABLE console_sessions; --"])
async def test_unknown_cookies_authenticate_nobody(sessions: ConsoleSessions, cookie: str) -> None:
    await sessions.log_in(ALICE)
    assert await sessions.authenticate(cookie) is None


@pytest.mark.parametrize(
    "machine",
    [
        pytest.param(Principal("system:node:host-1", "", (NODES_GROUP,)), id="node-credential"),
        pytest.param(Principal("system:bootstrap:abcdef", "", (BOOTSTRAPPERS_GROUP,)), id="bootstrap-token"),
    ],
)
async def test_machine_identities_neither_log_in_nor_mint_codes(sessions: ConsoleSessions, machine: Principal) -> None:
    for attempt in (sessions.issue_code(machine), sessions.log_in(machine)):
        with pytest.raises(APIError) as refused:
            await attempt
        assert refused.value.code == 403


SESSION = Session(ALICE, "the-token", T0)


@pytest.mark.parametrize(
    ("method", "presented", "allowed"),
    [
        ("GET", None, True),
        ("HEAD", None, True),
        ("OPTIONS", None, True),
        ("POST", "the-token", True),
        ("patch", "the-token", True),
        ("POST", None, False),
        ("PUT", "", False),
        ("PATCH", "the-token ", False),
        ("DELETE", "THE-TOKEN", False),
        ("PROPFIND", None, False),
    ],
)
def test_csrf_is_checked_on_every_method_that_may_write(method: str, presented: str | None, allowed: bool) -> None:
    if allowed:
        ConsoleSessions.check_csrf(SESSION, method, presented)
        return
    with pytest.raises(APIError) as refused:
        ConsoleSessions.check_csrf(SESSION, method, presented)
    assert refused.value.code == 403 and "X-CSRF-Token" in refused.value.message


async def test_the_sweep_deletes_what_expired_and_nothing_else(
    sessions: ConsoleSessions, clock: Clock, database_url: str
) -> None:
    # Other tests share this database, and their rows expire after 2026: this test's rows all expire in 2000, so a
    # sweep with the clock in 2000 can only ever see them.
    clock.now = datetime(2000, 1, 1, tzinfo=UTC)
    assert await sessions.sweep() == (0, 0)
    early_code = await sessions.issue_code(ALICE)
    early_session = await sessions.log_in(ALICE)
    clock.now += CODE_LIFETIME
    late_code = await sessions.issue_code(ALICE)
    assert await sessions.sweep() == (0, 1)
    clock.now += SESSION_LIFETIME - CODE_LIFETIME
    late_session = await sessions.log_in(ALICE)
    assert await sessions.sweep() == (1, 1)
    text = await stored_text(database_url)
    for gone in (early_code.code, early_session.cookie, late_code.code):
        assert hashlib.sha256(gone.encode()).hexdigest() not in text
    assert hashlib.sha256(late_session.cookie.encode()).hexdigest() in text
