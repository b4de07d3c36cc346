"""Project membership as seen a moment ago: each answer kept for a second, for checks that repeat.

Running watches re-check that their caller may still read what they stream (``nodus.api.http.watchaccess``);
a thousand watches of one project must not read it a thousand times a second.
"""

from __future__ import annotations

import time
from typing import Any

from nodus.api.auth.authorization import member_names
from nodus.api.auth.principal import Principal
from nodus.storage.errors import Key
from nodus.storage.objects import Storage

_FRESH_SECONDS = 1.0


class Membership:
    """Project documents and users' project sets, each read at most once a second."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._projects: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._readable: dict[tuple[str, tuple[str, ...]], tuple[float, frozenset[str]]] = {}

    async def project(self, name: str) -> dict[str, Any] | None:
        cached = self._projects.get(name)
        if cached is not None and time.monotonic() - cached[0] < _FRESH_SECONDS:
            return cached[1]
        found = await self._storage.get(Key("Project", "", name))
        self._remember(self._projects, name, found)
        return found

    async def readable(self, principal: Principal) -> frozenset[str]:
        key = (principal.user, principal.groups)
        cached = self._readable.get(key)
        if cached is not None and time.monotonic() - cached[0] < _FRESH_SECONDS:
            return cached[1]
        names: set[str] = set()
        for member in member_names(principal):
            names.update(await self._storage.names_containing("Project", {"spec": {"members": [{"name": member}]}}))
        found = frozenset(names)
        self._remember(self._readable, key, found)
        return found

    @staticmethod
    def _remember(cache: dict[Any, tuple[float, Any]], key: Any, value: Any) -> None:
        if len(cache) > 10_000:  # a bound: entries are a second's worth of answers
            cache.clear()
        cache[key] = (time.monotonic(), value)
