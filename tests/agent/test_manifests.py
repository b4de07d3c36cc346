"""Checkpoint manifests: canonical bytes, and the malformed or unsafe manifests that are refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from nodus.agent.manifests import CHUNK_SIZE, Manifest, ManifestInvalid, merge
from nodus.agent.snapshots import Mirror
from tests.agent.trees import CREATED, STATE, checkpoint, make_tree


def test_a_manifest_round_trips_through_canonical_bytes(mirror: Mirror, state: Path) -> None:
    make_tree(state)
    manifest = checkpoint(mirror, seq=7)
    data = manifest.to_bytes()
    body = orjson.loads(data)
    assert (body["apiVersion"], body["kind"], body["seq"], body["chunkSize"]) == (
        "nodus.dev/v1",
        "CheckpointManifest",
        7,
        CHUNK_SIZE,
    )
    assert list(body) == sorted(body)
    parsed = Manifest.from_bytes(data)
    assert parsed == manifest
    assert parsed.to_bytes() == data
    assert parsed.digests() == {d for e in manifest.entries for d in e.chunks}


def _valid() -> dict[str, Any]:
    digest = "sha256:" + "a" * 64
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "CheckpointManifest",
        "format": "Snapshot",
        "seq": 1,
        "paths": [STATE],
        "chunkSize": CHUNK_SIZE,
        "created": CREATED,
        "labels": {"job": "train"},
        "entries": [
            {"path": STATE, "type": "dir", "mode": 0o755},
            {"path": f"{STATE}/a.bin", "type": "file", "mode": 0o644, "size": CHUNK_SIZE + 1, "chunks": [digest] * 2},
            {"path": f"{STATE}/link", "type": "symlink", "mode": 0o777, "target": "/etc"},
            {"path": f"{STATE}/sub", "type": "dir", "mode": 0o755},
            {"path": f"{STATE}/sub/empty", "type": "file", "mode": 0o600, "size": 0, "chunks": []},
        ],
    }


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def change(body: dict[str, Any]) -> Any:
        body[key] = value
        return body

    return change


def _entry(index: int, **fields: Any) -> Callable[[dict[str, Any]], Any]:
    def change(body: dict[str, Any]) -> Any:
        body["entries"][index].update(fields)
        return body

    return change


def _insert(index: int, entry: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    def change(body: dict[str, Any]) -> Any:
        body["entries"].insert(index, entry)
        return body

    return change


def _swap(body: dict[str, Any]) -> Any:
    entries = body["entries"]
    entries[1], entries[2] = entries[2], entries[1]
    return body


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda body: "{", "not JSON", id="not-json"),
        pytest.param(lambda body: [], "not a JSON object", id="not-an-object"),
        pytest.param(_set("kind", "Job"), "apiVersion and kind must be", id="wrong-kind"),
        pytest.param(_set("apiVersion", "nodus.dev/v2"), "apiVersion and kind must be", id="unknown-version"),
        pytest.param(_set("format", "Tar"), "format must be Snapshot or Dcp", id="unknown-format"),
        pytest.param(_set("seq", -1), "seq must be >= 0", id="negative-seq"),
        pytest.param(_set("seq", True), "seq must be an integer", id="boolean-seq"),
        pytest.param(_set("chunkSize", 0), "chunkSize must be 1 to", id="zero-chunk-size"),
        pytest.param(_set("created", "yesterday"), "created must be an RFC 3339 time", id="bad-created"),
        pytest.param(_set("labels", {"job": 1}), "labels must map strings to strings", id="label-not-string"),
        pytest.param(_set("paths", "/nodus/state"), "paths must be a list", id="paths-not-list"),
        pytest.param(_set("paths", []), "at least one path", id="no-paths"),
        pytest.param(_set("paths", ["nodus/state"]), "absolute, normalised", id="relative-root"),
        pytest.param(_set("paths", [STATE, f"{STATE}/sub"]), "inside another path", id="nested-roots"),
        pytest.param(_set("paths", ["/nodus/../etc"]), "absolute, normalised", id="dotdot-root"),
        pytest.param(_entry(4, path=f"{STATE}/sub/../../../etc/x"), "absolute, normalised", id="dotdot-entry"),
        pytest.param(_entry(4, path="/etc/passwd"), "not under any of the paths", id="entry-outside-roots"),
        pytest.param(_entry(4, path=f"{STATE}//sub/empty"), "absolute, normalised", id="double-slash"),
        pytest.param(
            _insert(3, {"path": f"{STATE}/link/passwd", "type": "file", "mode": 0o644, "size": 0, "chunks": []}),
            "parent is not a directory",
            id="inside-a-symlink",
        ),
        pytest.param(_entry(4, path=f"{STATE}/zz/empty"), "parent is not a directory", id="missing-parent"),
        pytest.param(_swap, "sorted by path", id="unsorted"),
        pytest.param(_insert(5, {"path": f"{STATE}/sub/empty", "type": "dir", "mode": 0}), "sorted", id="duplicate"),
        pytest.param(_entry(1, chunks=["sha256:XYZ", "sha256:" + "a" * 64]), "not sha256:<64", id="bad-digest"),
        pytest.param(_entry(1, chunks=["md5:" + "a" * 32] * 2), "not sha256:<64", id="wrong-algorithm"),
        pytest.param(_entry(1, chunks=["sha256:" + "a" * 64]), "need 2 chunks, the entry has 1", id="too-few"),
        pytest.param(_entry(4, chunks=["sha256:" + "a" * 64]), "need 0 chunks", id="chunks-for-empty"),
        pytest.param(_entry(1, size=-1), "size must be >= 0", id="negative-size"),
        pytest.param(_entry(1, size="12"), "size must be an integer", id="size-not-integer"),
        pytest.param(_entry(3, type="fifo"), "type must be file, dir or symlink", id="unknown-type"),
        pytest.param(_entry(3, mode=0o10000), "mode must be permission bits", id="mode-too-large"),
        pytest.param(_entry(2, target=""), "a symlink needs a target", id="symlink-without-target"),
        pytest.param(_entry(0, path=None), "path must be a string", id="path-missing"),
    ],
)
def test_invalid_manifests_are_refused(change: Callable[[dict[str, Any]], Any], message: str) -> None:
    body = change(_valid())
    data = body.encode() if isinstance(body, str) else orjson.dumps(body)
    with pytest.raises(ManifestInvalid) as raised:
        Manifest.from_bytes(data)
    assert message in str(raised.value)


def test_the_valid_table_base_parses() -> None:
    assert Manifest.from_bytes(orjson.dumps(_valid())).size == CHUNK_SIZE + 1


def _shard(files: dict[str, str], seq: int = 1) -> Manifest:
    """A one-root manifest holding ``files`` (name -> digest letter) under STATE."""
    entries: list[dict[str, Any]] = [{"path": STATE, "type": "dir", "mode": 0o755}]
    for name, letter in sorted(files.items()):
        entries.append(
            {"path": f"{STATE}/{name}", "type": "file", "mode": 0o644, "size": 1, "chunks": [f"sha256:{letter * 64}"]}
        )
    return Manifest.from_bytes(orjson.dumps({**_valid(), "seq": seq, "entries": entries}))


def test_a_gang_checkpoints_shards_merge_into_one_tree_the_last_shard_winning() -> None:
    rank0 = _shard({"__0_0.distcp": "a", ".metadata": "b"}, seq=3)
    rank1 = _shard({"__1_0.distcp": "c", ".metadata": "d"}, seq=5)
    merged = merge([rank0, rank1])
    merged.check()
    assert [e.path.rsplit("/", 1)[-1] for e in merged.entries] == ["state", ".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert merged.entries[1].chunks == ("sha256:" + "d" * 64,), "the later (own) shard wins a path both hold"
    assert merged.seq == 5


def test_shards_that_cannot_be_one_tree_are_refused() -> None:
    as_file = _shard({"sub": "a"})
    as_directory = Manifest.from_bytes(
        orjson.dumps(
            {
                **_valid(),
                "entries": [
                    {"path": STATE, "type": "dir", "mode": 0o755},
                    {"path": f"{STATE}/sub", "type": "dir", "mode": 0o755},
                    {"path": f"{STATE}/sub/x", "type": "file", "mode": 0o644, "size": 0, "chunks": []},
                ],
            }
        )
    )
    with pytest.raises(ManifestInvalid):
        merge([as_directory, as_file])
