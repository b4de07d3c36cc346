"""The checkpoint manifest: how a checkpoint is stored, and what makes one valid.

A checkpoint saves ``spec.recovery.checkpoint.paths`` (the *roots*, such as ``/nodus/state``) together.
It is stored as content-addressed chunks plus one manifest that names them:

* **Chunks.** A regular file is cut at every :data:`CHUNK_SIZE` bytes; each piece is a blob named by
  its digest, ``sha256:<hex>`` (an empty file has no chunk). Fixed-size chunks make the next
  checkpoint cheap when a program rewrites part of a file in place (a shard, optimizer state): only
  the chunks whose bytes changed are new. Bytes inserted in the middle of a file shift every later
  chunk, which then uploads again; checkpoint writers rewrite or replace files, they rarely insert.
* **The manifest** (:class:`Manifest`) lists every directory, file (mode, size, chunk digests) and
  symbolic link (target, stored as-is) by the path the program sees, as canonical JSON of
  ``kind: CheckpointManifest``. Its sha256 names the checkpoint. :meth:`Manifest.from_bytes` refuses
  anything a restore could be tricked by (:class:`ManifestInvalid`): roots that are not normalised
  absolute paths or that nest, entries that are not under the roots, and entries that are not all
  inside directory entries (no file "inside" a symbolic link), so that a restore which writes only
  what a checked manifest names stays within the roots.

This module only describes and checks manifests; it touches no filesystem. The mirror that produces
them is ``nodus.agent.snapshots``, the restore that consumes them ``nodus.agent.restoring``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

import orjson

CHUNK_SIZE = 4 * 1024 * 1024
API_VERSION = "nodus.dev/v1"
KIND = "CheckpointManifest"
MAX_CHUNK_SIZE = 64 * 1024 * 1024
"""The largest ``chunkSize`` a manifest may declare: a restore holds a few chunks in memory at once."""

EntryType = Literal["file", "dir", "symlink"]
Format = Literal["Snapshot", "Dcp"]
_FORMATS = ("Snapshot", "Dcp")
_TYPES = ("file", "dir", "symlink")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class ManifestInvalid(Exception):
    """A manifest is malformed or unsafe; the message names the field and what is wrong with it."""


@dataclass(frozen=True)
class Entry:
    """One directory, regular file or symbolic link of a checkpoint, by the path the program sees.

    ``size`` and ``chunks`` are for files (``chunks`` empty until the mirror hashed them), ``target``
    for symbolic links; ``mode`` is the permission bits (``0o644``)."""

    path: str
    type: EntryType
    mode: int
    size: int = 0
    chunks: tuple[str, ...] = ()
    target: str = ""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"path": self.path, "type": self.type, "mode": self.mode}
        if self.type == "file":
            body.update(size=self.size, chunks=list(self.chunks))
        elif self.type == "symlink":
            body["target"] = self.target
        return body


@dataclass
class Manifest:
    """What one checkpoint holds. ``entries`` are sorted by path component by component, so a
    directory comes before what it contains; ``labels`` (job, index, attempt) are the caller's."""

    format: Format
    seq: int
    paths: list[str]
    chunk_size: int
    entries: list[Entry]
    created: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """The bytes of every file: what the program saved, before deduplication."""
        return sum(entry.size for entry in self.entries if entry.type == "file")

    def digests(self) -> set[str]:
        """Every chunk the manifest names, each once."""
        return {digest for entry in self.entries for digest in entry.chunks}

    def to_bytes(self) -> bytes:
        """Canonical JSON (sorted keys, no spaces): equal manifests give equal bytes, hence equal digests."""
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "format": self.format,
            "seq": self.seq,
            "paths": list(self.paths),
            "chunkSize": self.chunk_size,
            "created": self.created,
            "labels": dict(self.labels),
            "entries": [entry.to_json() for entry in self.entries],
        }
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and :meth:`check` a manifest; :class:`ManifestInvalid` for anything malformed. Unknown
        fields are ignored (a newer agent may add some); missing or mistyped ones are not."""
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ManifestInvalid(f"not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ManifestInvalid("not a JSON object")
        if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
            raise ManifestInvalid(
                f"apiVersion and kind must be {API_VERSION} and {KIND}, got {body.get('apiVersion')!r} and "
                f"{body.get('kind')!r}"
            )
        if body.get("format") not in _FORMATS:
            raise ManifestInvalid(f"format must be Snapshot or Dcp, got {body.get('format')!r}")
        paths, entries, labels = body.get("paths"), body.get("entries"), body.get("labels", {})
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ManifestInvalid("paths must be a list of strings")
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ManifestInvalid("entries must be a list of objects")
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ManifestInvalid("labels must map strings to strings")
        manifest = cls(
            format=cast(Format, body["format"]),
            seq=_integer(body, "seq", "seq"),
            paths=list(paths),
            chunk_size=_integer(body, "chunkSize", "chunkSize"),
            entries=[_entry(item, f"entries[{n}]") for n, item in enumerate(entries)],
            created=_string(body, "created", "created"),
            labels=dict(labels),
        )
        manifest.check()
        return manifest

    def check(self) -> None:
        """Raise :class:`ManifestInvalid` unless every path is normalised and under one root, entries are
        sorted without duplicates, every entry but a root is inside a directory entry, digests are
        well-formed and every file has one chunk per ``chunk_size`` bytes."""
        if self.seq < 0:
            raise ManifestInvalid(f"seq must be >= 0, got {self.seq}")
        if not 0 < self.chunk_size <= MAX_CHUNK_SIZE:
            raise ManifestInvalid(f"chunkSize must be 1 to {MAX_CHUNK_SIZE}, got {self.chunk_size}")
        try:
            datetime.fromisoformat(self.created)
        except ValueError:
            raise ManifestInvalid(f"created must be an RFC 3339 time, got {self.created!r}") from None
        check_roots(self.paths, ManifestInvalid)
        directories: set[str] = set()
        previous: list[str] | None = None
        for n, entry in enumerate(self.entries):
            where = f"entries[{n}] ({entry.path!r})"
            _check_path(entry.path, where, ManifestInvalid)
            if root_of(entry.path, self.paths) is None:
                raise ManifestInvalid(f"{where}: not under any of the paths {self.paths}")
            key = entry.path.split("/")
            if previous is not None and key <= previous:
                raise ManifestInvalid(f"{where}: entries must be sorted by path, without duplicates")
            previous = key
            if entry.path not in self.paths and entry.path.rpartition("/")[0] not in directories:
                raise ManifestInvalid(f"{where}: its parent is not a directory entry of the manifest")
            _check_entry(entry, where, self.chunk_size)
            if entry.type == "dir":
                directories.add(entry.path)


def check_roots(paths: list[str] | tuple[str, ...], error: type[Exception]) -> None:
    """Roots must be normalised absolute paths (not ``/``), without duplicates, none inside another."""
    if not paths:
        raise error("paths must name at least one path")
    for path in paths:
        _check_path(path, f"path {path!r}", error)
        if path == "/":
            raise error("path '/' cannot be checkpointed: name the directories to save")
        if root_of(path, [other for other in paths if other != path]) is not None or paths.count(path) > 1:
            raise error(f"path {path!r} is repeated or inside another path of the checkpoint")


def root_of(path: str, roots: list[str] | tuple[str, ...]) -> str | None:
    """The root that ``path`` is, or is under; None if it is under none of them."""
    for root in roots:
        if path == root or path.startswith(root + "/"):
            return root
    return None


def _check_path(path: str, where: str, error: type[Exception]) -> None:
    parts = path.split("/")
    if not path.startswith("/") or "\0" in path or (path != "/" and any(p in ("", ".", "..") for p in parts[1:])):
        raise error(f"{where}: must be an absolute, normalised path without '.' or '..' components")


def _check_entry(entry: Entry, where: str, chunk_size: int) -> None:
    if entry.type not in _TYPES:
        raise ManifestInvalid(f"{where}: type must be file, dir or symlink, got {entry.type!r}")
    if not 0 <= entry.mode <= 0o7777:
        raise ManifestInvalid(f"{where}: mode must be permission bits (0 to 0o7777), got {entry.mode}")
    if entry.type == "symlink" and (not entry.target or "\0" in entry.target):
        raise ManifestInvalid(f"{where}: a symlink needs a target")
    if entry.type != "file":
        return
    if entry.size < 0:
        raise ManifestInvalid(f"{where}: size must be >= 0, got {entry.size}")
    for digest in entry.chunks:
        if not _DIGEST.fullmatch(digest):
            raise ManifestInvalid(f"{where}: chunk {digest!r} is not sha256:<64 lower-case hex digits>")
    wanted = -(-entry.size // chunk_size)
    if len(entry.chunks) != wanted:
        raise ManifestInvalid(
            f"{where}: {entry.size} bytes in chunks of {chunk_size} need {wanted} chunks, the entry has "
            f"{len(entry.chunks)}"
        )


def _entry(item: dict[str, Any], where: str) -> Entry:
    kind = item.get("type")
    if kind not in _TYPES:
        raise ManifestInvalid(f"{where}: type must be file, dir or symlink, got {kind!r}")
    chunks = item.get("chunks", []) if kind == "file" else []
    if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
        raise ManifestInvalid(f"{where}: chunks must be a list of digests")
    return Entry(
        path=_string(item, "path", where),
        type=cast(EntryType, kind),
        mode=_integer(item, "mode", where),
        size=_integer(item, "size", where) if kind == "file" else 0,
        chunks=tuple(chunks),
        target=_string(item, "target", where) if kind == "symlink" else "",
    )


def _integer(body: dict[str, Any], key: str, where: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ManifestInvalid(f"{where}: {key} must be an integer, got {value!r}")
    return value


def _string(body: dict[str, Any], key: str, where: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise ManifestInvalid(f"{where}: {key} must be a string, got {value!r}")
    return value


def merge(manifests: list[Manifest]) -> Manifest:
    """One manifest holding every entry of ``manifests``, a later one's entry winning a path both hold: the
    shards of one gang checkpoint (each rank's files, and rank 0's ``.metadata``) restored as one tree.
    Raises :class:`ManifestInvalid` when they cannot be one (different chunk sizes, or a result that fails
    :meth:`Manifest.check`, such as a path that is a file in one and a directory in another)."""
    if not manifests:
        raise ManifestInvalid("nothing to merge")
    first = manifests[-1]
    if any(m.chunk_size != first.chunk_size for m in manifests):
        raise ManifestInvalid("the shards were written with different chunk sizes")
    paths = list(dict.fromkeys(path for m in manifests for path in m.paths))
    entries = {entry.path: entry for m in manifests for entry in m.entries}
    merged = Manifest(
        format=first.format,
        seq=first.seq,
        paths=paths,
        chunk_size=first.chunk_size,
        entries=sorted(entries.values(), key=lambda e: e.path.split("/")),
        created=first.created,
        labels=dict(first.labels),
    )
    merged.check()
    return merged
