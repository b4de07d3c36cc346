"""A work queue of reconcile keys, after client-go's ``workqueue``: de-duplicated, one key at a time.

Guarantees:

- A key is queued at most once however often it is added (``add`` of a queued key is a no-op):
  reconcilers are level-triggered, so ten changes to one object need one reconcile.
- A key is never handed to two workers at once. Adding a key while it is being processed marks it
  dirty; :meth:`done` queues it again, so the change that arrived mid-reconcile is not lost.
- Keys are handed out in the order they became ready (FIFO).
- ``add_after`` keeps only the earliest pending time per key; ``add_rate_limited`` waits
  ``base * 2**failures`` (5 ms, 10 ms, ... capped at 60 s) until :meth:`forget` resets the key.
- After :meth:`shutdown`, adds are ignored and :meth:`get` raises :class:`ShutDown` at once, even
  with keys still queued: a stopping controller starts no new work, and level-triggered
  reconcilers pick those keys up again from the informers' state when they next start.

All methods but :meth:`get` are synchronous and must be called from the event loop's thread
(informer handlers call :meth:`add` directly).

An :class:`Observer` (``observer``) hears of every add, every rate-limited retry, and how long each key waited
ready in the queue before a worker took it: the controllers' metrics (``nodus.controllers.metrics``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down."""


class Observer(Protocol):
    """What a queue reports as it goes; each call is made on the event loop's thread and must not block."""

    def added(self) -> None:
        """A key was added (whether or not it was queued already)."""

    def retried(self) -> None:
        """A key was added after its backoff (:meth:`WorkQueue.add_rate_limited`)."""

    def taken(self, waited: float) -> None:
        """A worker took a key that had been ready for ``waited`` seconds."""


class WorkQueue(Generic[K]):
    """De-duplicating work queue with delayed and rate-limited adds."""

    def __init__(self, *, base_delay: float = 0.005, max_delay: float = 60.0, observer: Observer | None = None) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.observer = observer
        self._queue: deque[K] = deque()
        self._ready_since: dict[K, float] = {}  # queued key -> when it was queued (time.monotonic())
        self._dirty: set[K] = set()  # queued, or to be queued again when done
        self._processing: set[K] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[K, int] = {}
        self._shutting_down = False

    def __len__(self) -> int:
        """Keys ready to be handed out (not those being processed or waiting for a delay)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def add(self, key: K) -> None:
        """Queue ``key`` unless it is queued already; mark it dirty if it is being processed."""
        if self.observer is not None:
            self.observer.added()
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._append(key)

    def add_after(self, key: K, seconds: float) -> None:
        """Queue ``key`` after ``seconds``; an earlier pending time for the key wins."""
        if self._shutting_down:
            return
        if seconds <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + seconds
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= when:
                return
            pending[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def add_rate_limited(self, key: K) -> None:
        """Queue ``key`` after its backoff, and double the backoff for next time."""
        if self.observer is not None:
            self.observer.retried()
        self.add_after(key, self.when(key))

    def when(self, key: K) -> float:
        """The backoff for ``key`` now, counting this as one more failure."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if failures >= 64:  # past any sensible cap, and keeps 2**failures a small float
            return self.max_delay
        return float(min(self.max_delay, self.base_delay * 2**failures))

    def num_requeues(self, key: K) -> int:
        """How many rate-limited requeues ``key`` has had since it was last forgotten."""
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff (after a successful reconcile, or a terminal error)."""
        self._failures.pop(key, None)

    async def get(self) -> K:
        """Wait for a key and mark it as being processed; the caller must call :meth:`done` with it."""
        loop = asyncio.get_running_loop()
        while True:
            if self._shutting_down:
                raise ShutDown
            if self._queue:
                key = self._queue.popleft()
                self._processing.add(key)
                self._dirty.discard(key)
                since = self._ready_since.pop(key, None)
                if self.observer is not None and since is not None:
                    self.observer.taken(time.monotonic() - since)
                return key
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # we were woken but will not take the key: pass the wake-up on
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def done(self, key: K) -> None:
        """Processing of ``key`` finished; queue it again if it was added meanwhile."""
        self._processing.discard(key)
        if key in self._dirty and not self._shutting_down:
            self._append(key)

    def shutdown(self) -> None:
        """Stop: cancel delayed adds, ignore new adds, and make every :meth:`get` raise :class:`ShutDown`."""
        self._shutting_down = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _append(self, key: K) -> None:
        self._queue.append(key)
        self._ready_since[key] = time.monotonic()
        self._wake_one()

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
