"""What storage can refuse. The API layer maps each to a Kubernetes Status."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    """Where an object lives: its kind, its project ('' for cluster-scoped kinds) and its name."""

    kind: str
    namespace: str
    name: str


class StorageError(Exception):
    """Base class; a bare StorageError means the database failed (the caller sees a 500 or 503)."""


class NotFound(StorageError):
    def __init__(self, key: Key) -> None:
        super().__init__(f"{key.kind} {key.namespace}/{key.name} not found")
        self.key = key


class AlreadyExists(StorageError):
    def __init__(self, key: Key) -> None:
        super().__init__(f"{key.kind} {key.namespace}/{key.name} already exists")
        self.key = key


class Conflict(StorageError):
    """The object changed since the caller read it (its resourceVersion moved on)."""

    def __init__(self, key: Key, current_rv: int) -> None:
        super().__init__(f"{key.kind} {key.namespace}/{key.name} is at resourceVersion {current_rv}")
        self.key = key
        self.current_rv = current_rv


class Expired(StorageError):
    """A resourceVersion older than the watch log's retention window (HTTP 410, reason Expired)."""

    def __init__(self, requested_rv: int, oldest_rv: int) -> None:
        super().__init__(f"resourceVersion {requested_rv} is too old: the watch log now starts after {oldest_rv}")
        self.requested_rv = requested_rv
        self.oldest_rv = oldest_rv


class TooLarge(StorageError):
    """A resourceVersion newer than anything stored yet (kube-apiserver answers 504 'Too large')."""

    def __init__(self, requested_rv: int, current_rv: int) -> None:
        super().__init__(f"resourceVersion {requested_rv} is newer than the current {current_rv}")
        self.requested_rv = requested_rv
        self.current_rv = current_rv
