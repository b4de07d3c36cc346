"""Sealing and the Secret and Connection strategies, without a server."""

from __future__ import annotations

import base64
import copy
import stat
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from nodus.api.errors import APIError
from nodus.api.fieldmanagement.lastapplied import LAST_APPLIED_ANNOTATION
from nodus.api.kinds import connection, secret
from nodus.apimachinery import units
from nodus.apimachinery.sealing import KeyFileError, Keyring, OpenError, Sealed
from nodus.apis.v1 import labels


class Server:
    """The Secret strategy of a server started with the ``ring`` fixture's keyring (none without it)."""

    strategy = secret.SecretStrategy()


@pytest.fixture
def ring(tmp_path: Path) -> Iterator[Keyring]:
    keys = Keyring.generate(tmp_path / "keys")
    Server.strategy = secret.SecretStrategy(keys)
    yield keys
    Server.strategy = secret.SecretStrategy()


# --- sealing -------------------------------------------------------------------------------------


def test_seal_round_trip(tmp_path: Path) -> None:
    ring = Keyring.generate(tmp_path / "keys")
    sealed = ring.seal(b"hunter2", b"uid-1/1/password")
    assert b"hunter2" not in sealed.ciphertext_b64.encode()
    assert ring.open(sealed, b"uid-1/1/password") == b"hunter2"
    assert Keyring.load(tmp_path / "keys").open(sealed, b"uid-1/1/password") == b"hunter2"


def test_generate_is_private_and_never_overwrites(tmp_path: Path) -> None:
    Keyring.generate(tmp_path / "keys")
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o600
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        Keyring.generate(tmp_path / "keys")


@pytest.mark.parametrize(
    "associated",
    [pytest.param(b"uid-2/1/password", id="other-uid"), pytest.param(b"uid-1/2/password", id="other-version")],
)
def test_other_associated_data_does_not_open(tmp_path: Path, associated: bytes) -> None:
    ring = Keyring.generate(tmp_path / "keys")
    sealed = ring.seal(b"hunter2", b"uid-1/1/password")
    with pytest.raises(OpenError) as raised:
        ring.open(sealed, associated)
    assert "hunter2" not in str(raised.value)


def test_rotation_old_key_opens_new_key_seals(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    old = Keyring.generate(path, key_id="k1")
    before = old.seal(b"v1", b"ad")
    with path.open("a") as handle:
        handle.write(f"k2 {base64.b64encode(b'x' * 32).decode()}\n")
    rotated = Keyring.load(path)
    assert rotated.active_id == "k2"
    assert rotated.open(before, b"ad") == b"v1"
    after = rotated.seal(b"v2", b"ad")
    assert after.key_id == "k2"
    with pytest.raises(OpenError, match="k2"):
        old.open(after, b"ad")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "holds no key", id="empty"),
        pytest.param("k1\n", "expected", id="no-key"),
        pytest.param("k1 not-base64!\n", "not valid base64", id="not-base64"),
        pytest.param(f"k1 {base64.b64encode(b'short').decode()}\n", "5 bytes", id="short"),
    ],
)
def test_bad_key_files(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "keys").write_text(text)
    with pytest.raises(KeyFileError, match=message):
        Keyring.load(tmp_path / "keys")


# --- the Secret strategy ---------------------------------------------------------------------------


def make_secret(**fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "p", "uid": str(uuid.uuid4())},
        **fields,
    }


def created(**fields: Any) -> dict[str, Any]:
    obj = make_secret(**fields)
    Server.strategy.prepare_for_create(obj)
    assert Server.strategy.validate(obj) == []
    return obj


def test_create_seals_and_serves_no_values(ring: Keyring) -> None:
    obj = created(data={"a": base64.b64encode(b"alpha").decode()}, stringData={"b": "bravo"})
    assert "data" not in obj and "stringData" not in obj
    assert obj["status"]["version"] == 1 and obj["status"]["keys"] == ["a", "b"]
    assert obj["type"] == "Opaque"
    assert secret.open_version(ring, obj, 1) == {"a": b"alpha", "b": b"bravo"}
    shown = secret.served(obj)
    assert "sealed" not in shown and "alpha" not in str(shown) and shown["status"]["keys"] == ["a", "b"]


def test_string_data_wins_over_data(ring: Keyring) -> None:
    obj = created(data={"a": base64.b64encode(b"x").decode()}, stringData={"a": "y"})
    assert secret.open_version(ring, obj, 1) == {"a": b"y"}


def test_ciphertext_moved_to_another_secret_does_not_open(ring: Keyring) -> None:
    one, two = created(stringData={"a": "alpha"}), created(stringData={"a": "other"})
    two["sealed"] = copy.deepcopy(one["sealed"])
    with pytest.raises(OpenError):
        secret.open_version(ring, two, 1)


def test_values_are_sealed_under_the_secrets_own_subkey(ring: Keyring) -> None:
    """A value sealed for Secrets opens neither with the key file's key itself nor with another purpose's subkey
    (estimate ETags, node credentials): each use of the key file is separated (ADR 0035)."""
    obj = created(stringData={"a": "alpha"})
    entry = obj["sealed"]["versions"][0]
    assert entry["kdf"] == secret.KDF
    box = Sealed(entry["keyID"], entry["values"]["a"]["nonce"], entry["values"]["a"]["ciphertext"])
    associated = b"\x00".join((b"nodus.dev/Secret", obj["metadata"]["uid"].encode(), b"1", b"a"))
    assert ring.derive(secret.PURPOSE).open(box, associated) == b"alpha"
    for other in (ring, ring.derive("estimate-etags"), ring.derive("node-credentials")):
        with pytest.raises(OpenError):
            other.open(box, associated)


def test_versions_sealed_before_subkeys_open_and_reseal_moves_them(ring: Keyring, tmp_path: Path) -> None:
    obj = created(stringData={"a": "alpha"})
    uid = obj["metadata"]["uid"]
    # A version as an earlier Nodus stored it: sealed with the key itself, no "kdf".
    legacy = ring.seal(b"older", b"\x00".join((b"nodus.dev/Secret", uid.encode(), b"2", b"a")))
    obj["sealed"]["versions"].append(
        {
            "version": 2,
            "keyID": legacy.key_id,
            "createdTime": "2026-01-01T00:00:00Z",
            "values": {"a": {"nonce": legacy.nonce_b64, "ciphertext": legacy.ciphertext_b64}},
        }
    )
    assert secret.open_version(ring, obj, 2) == {"a": b"older"}
    # Rotation: a new key is appended; reseal moves every version under it, values and numbers unchanged.
    (tmp_path / "keys").write_text((tmp_path / "keys").read_text() + f"k2 {base64.b64encode(b'2' * 32).decode()}\n")
    rotated = Keyring.load(tmp_path / "keys")
    resealed, changed = secret.reseal(rotated, obj)
    assert changed == 2
    assert [(v["version"], v["keyID"], v["kdf"]) for v in resealed["sealed"]["versions"]] == [
        (1, "k2", secret.KDF),
        (2, "k2", secret.KDF),
    ]
    assert resealed["sealed"]["versions"][1]["createdTime"] == "2026-01-01T00:00:00Z"
    only_new = Keyring([("k2", b"2" * 32)])  # the old key is gone from the file: everything still opens
    assert secret.open_version(only_new, resealed, 1) == {"a": b"alpha"}
    assert secret.open_version(only_new, resealed, 2) == {"a": b"older"}
    assert secret.reseal(rotated, resealed)[1] == 0


def update(old: dict[str, Any], **fields: Any) -> dict[str, Any]:
    new = secret.served(copy.deepcopy(old))
    new.update(fields)
    Server.strategy.prepare_for_update(new, old)
    assert Server.strategy.validate_update(new, old) == []
    return new


def test_update_versions_only_when_values_change(ring: Keyring) -> None:
    v1 = created(stringData={"a": "alpha"})
    same = update(v1, stringData={"a": "alpha"})
    assert same["sealed"] == v1["sealed"] and same["status"] == v1["status"]
    kept = update(v1, metadata={**v1["metadata"], "labels": {"x": "y"}})
    assert kept["sealed"] == v1["sealed"]
    v2 = update(v1, data={"b": base64.b64encode(b"bravo").decode()})
    assert v2["status"]["version"] == 2 and v2["status"]["keys"] == ["b"]
    assert [v["version"] for v in v2["status"]["versions"]] == [1, 2]
    assert secret.open_version(ring, v2, 1) == {"a": b"alpha"}
    assert secret.open_version(ring, v2, 2) == {"b": b"bravo"}


def test_at_most_32_versions_are_kept(ring: Keyring) -> None:
    obj = created(stringData={"a": "0"})
    for n in range(1, 40):
        obj = update(obj, stringData={"a": str(n)})
    versions = [v["version"] for v in obj["status"]["versions"]]
    assert versions == list(range(9, 41)) and obj["status"]["version"] == 40


def age(obj: dict[str, Any], version: int, minutes: int) -> None:
    """Make ``version`` of ``obj`` look ``minutes`` old."""
    when = units.format_time(units.now() - timedelta(minutes=minutes))
    for entry in obj["sealed"]["versions"]:
        if entry["version"] == version:
            entry["createdTime"] = when


def test_old_versions_no_job_pins_go_after_the_grace(ring: Keyring) -> None:
    obj = created(stringData={"a": "one"})
    obj = update(obj, stringData={"a": "two"})
    obj = update(obj, stringData={"a": "three"})
    obj = update(obj, stringData={"a": "four"})
    for version, minutes in ((1, 60), (2, 50), (3, 40), (4, 5)):
        age(obj, version, minutes)
    unannotated = update(obj, metadata={**obj["metadata"], "labels": {"x": "y"}})
    assert [v["version"] for v in unannotated["status"]["versions"]] == [1, 2, 3, 4]  # no pins known: keep all
    annotations = {labels.PINNED_VERSIONS: "2"}
    pruned = update(obj, metadata={**obj["metadata"], "annotations": annotations})
    # 1 superseded 50 minutes ago and unpinned: gone; 2 pinned; 3 superseded 5 minutes ago: in its grace.
    assert [v["version"] for v in pruned["status"]["versions"]] == [2, 3, 4]
    assert secret.open_version(ring, pruned, 2) == {"a": b"two"}
    assert secret.open_version(ring, pruned, 1) is None


def test_last_applied_annotation_loses_its_values(ring: Keyring) -> None:
    applied = '{"apiVersion":"nodus.dev/v1","kind":"Secret","stringData":{"a":"alpha"}}\n'
    obj = created(stringData={"a": "alpha"})
    new = update(obj, metadata={**obj["metadata"], "annotations": {LAST_APPLIED_ANNOTATION: applied}})
    text = new["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
    assert "alpha" not in text and "stringData" not in text


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param({"data": {"a": "not base64 hunter2"}}, "data[a]", id="not-base64"),
        pytest.param({"stringData": {"bad key": "hunter2"}}, "stringData[bad key]", id="bad-key"),
        pytest.param({"stringData": {"a": 7}}, "stringData[a]", id="not-string"),
        pytest.param({"stringData": {"a": "x" * (1024 * 1024)}}, "data", id="too-large"),
    ],
)
def test_invalid_values_are_not_echoed(ring: Keyring, fields: dict[str, Any], field: str) -> None:
    obj = make_secret(**fields)
    Server.strategy.prepare_for_create(obj)
    problems = Server.strategy.validate(obj)
    assert [p.field for p in problems] == [field]
    assert "hunter2" not in problems[0].message() and "xxxx" not in problems[0].message()


def test_no_keyring_is_a_503() -> None:
    with pytest.raises(APIError) as raised:
        Server.strategy.prepare_for_create(make_secret(stringData={"a": "alpha"}))
    assert raised.value.code == 503 and "--secret-key-file" in raised.value.message


# --- the Connection strategy -----------------------------------------------------------------------


def validate_connection(spec: dict[str, Any]) -> list[tuple[str, str]]:
    obj = {"metadata": {"name": "c"}, "spec": spec}
    connection.CONNECTION.strategy.prepare_for_create(obj)
    return [(p.field, p.message()) for p in connection.CONNECTION.strategy.validate(obj)]


S3 = {"endpoint": "https://s3.us-east-1.amazonaws.com", "region": "us-east-1", "bucket": "b", "credentialsSecret": "s"}


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        pytest.param({"type": "S3", "s3": S3}, [], id="s3"),
        # Loopback only on a server started with --allow-loopback-endpoints (tests/api/kinds/test_destinationrules.py).
        pytest.param({"type": "S3", "s3": {**S3, "endpoint": "http://127.0.0.1:9000"}}, ["spec.s3.endpoint"],
                     id="s3-local-http"),
        pytest.param({"type": "Neon", "postgres": {"dsnSecret": "neon"}}, [], id="neon"),
        pytest.param({"type": "S3", "s3": {**S3, "endpoint": "http://s3.example.com"}}, ["spec.s3.endpoint"],
                     id="s3-remote-http"),
        pytest.param({"type": "S3", "s3": {**S3, "endpoint": "s3.example.com"}}, ["spec.s3.endpoint"], id="no-scheme"),
        pytest.param({"type": "S3"}, ["spec.s3"], id="s3-missing"),
        pytest.param({"type": "S3", "s3": S3, "postgres": {"dsnSecret": "x"}}, ["spec.postgres"], id="both"),
        pytest.param({"type": "Postgres", "s3": S3}, ["spec.postgres", "spec.s3"], id="postgres-with-s3"),
        pytest.param({"type": "MySQL"}, ["spec.type"], id="unknown-type"),
        pytest.param({"type": "S3", "s3": {**S3, "credentialsSecret": "Not_A_Name"}}, ["spec.s3.credentialsSecret"],
                     id="bad-secret-name"),
    ],
)  # fmt: skip
def test_connection_validation(spec: dict[str, Any], fields: list[str]) -> None:
    assert [field for field, _ in validate_connection(spec)] == fields


def test_dsn_key_defaults() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "c"}, "spec": {"type": "Supabase", "postgres": {"dsnSecret": "s"}}}
    connection.CONNECTION.strategy.prepare_for_create(obj)
    assert obj["spec"]["postgres"]["dsnKey"] == "dsn"
