"""Per-user caps on concurrent watches and followed logs, and how long a watch may last."""

from __future__ import annotations

import pytest

from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError
from nodus.api.http.streaming import StreamLimits
from nodus.api.http.watches import watch_timeout

ALICE, BOB = Principal("alice", groups=("developers",)), Principal("bob")
ADMIN = Principal("admin", groups=("system:masters",))


def test_the_slot_past_the_cap_is_a_429_with_retry_after() -> None:
    limits = StreamLimits(watches=2, follows=1)
    held = [limits.acquire(ALICE, "watch"), limits.acquire(ALICE, "watch")]
    with pytest.raises(APIError) as refused:
        limits.acquire(ALICE, "watch")
    assert refused.value.code == 429 and refused.value.reason == "TooManyRequests"
    assert refused.value.headers == {"Retry-After": "5"} and "--max-watches-per-user=2" in refused.value.message
    limits.acquire(ALICE, "follow")  # counted apart from watches
    limits.acquire(BOB, "watch")  # and per user
    held[0].release()
    held[0].release()  # idempotent: a second release frees nothing more
    limits.acquire(ALICE, "watch")
    with pytest.raises(APIError):
        limits.acquire(ALICE, "watch")


def test_administrators_and_a_zero_cap_are_not_counted() -> None:
    limits = StreamLimits(watches=1, follows=0)
    for _ in range(5):
        limits.acquire(ADMIN, "watch")
        limits.acquire(ALICE, "follow")
    assert not limits.open


@pytest.mark.parametrize(
    ("asked", "low", "high"),
    [
        pytest.param(None, 1800, 3600, id="unset-spread"),
        pytest.param(60, 60, 60, id="honoured"),
        pytest.param(10**9, 3600, 3600, id="capped"),
        pytest.param(10**400, 3600, 3600, id="larger-than-a-float"),
    ],
)
def test_watch_timeout(asked: int | None, low: float, high: float) -> None:
    assert low <= watch_timeout(1800, asked) <= high
