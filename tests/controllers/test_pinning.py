"""Admission of the data plane: what a Job reads is pinned, or the Job waits or fails, saying why."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.controllers.jobs import pinning

Object = dict[str, Any]
DIGEST = "d" * 64


def secret(name: str, uid: str = "uid-1", versions: dict[int, list[str]] | None = None) -> Object:
    versions = versions or {1: ["token"]}
    return {
        "metadata": {"name": name, "uid": uid},
        "status": {
            "version": max(versions),
            "keys": versions[max(versions)],
            "versions": [{"version": v, "keys": keys} for v, keys in sorted(versions.items())],
        },
    }


def volume(name: str, revisions: int) -> Object:
    return {
        "metadata": {"name": name, "uid": f"v-{name}"},
        "status": {
            **({"latestRevision": revisions} if revisions else {}),
            "revisions": [
                {
                    "revision": r,
                    "sha256": f"{r:064x}",
                    "size": 10,
                    "mediaType": "application/x-tar",
                    "createdTime": "2026-11-29T12:00:00Z",
                    "source": "upload",
                }
                for r in range(1, revisions + 1)
            ],
        },
    }


def lookup_of(*objects: tuple[str, Object]) -> pinning.Lookup:
    table = {(plural, obj["metadata"]["name"]): obj for plural, obj in objects}
    return lambda plural, name: table.get((plural, name))


def secret_env(name: str = "s", key: str = "token") -> list[Object]:
    return [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}]


def test_secrets_are_pinned_by_uid_and_latest_version() -> None:
    pins = pinning.pin(
        {"env": secret_env(), "secrets": [{"name": "s"}]},
        lookup_of(("secrets", secret("s", versions={1: [], 2: ["token"]}))),
    )
    assert isinstance(pins, pinning.Pins)
    assert pins.status() == {"secretVersions": {"s": 2}, "secretVersionIDs": {"s": "uid-1"}}
    assert pins.attempt()["secrets"] == [{"name": "s", "uid": "uid-1", "version": 2}]


@pytest.mark.parametrize(
    ("spec", "objects", "reason", "final"),
    [
        pytest.param({"env": secret_env()}, [], "SecretNotFound", False, id="secret-missing"),
        pytest.param(
            {"env": secret_env(key="other")}, [("secrets", secret("s"))], "SecretKeyNotFound", False, id="key-missing"
        ),
        pytest.param(
            {"secrets": [{"name": "s", "version": 3}]},
            [("secrets", secret("s"))],
            "SecretVersionNotFound",
            True,
            id="version-missing",
        ),
        pytest.param(
            {"inputs": [{"name": "v", "volume": {"name": "data"}}]}, [], "VolumeNotFound", False, id="volume-missing"
        ),
        pytest.param(
            {"inputs": [{"name": "v", "volume": {"name": "data"}}]},
            [("volumes", volume("data", 0))],
            "VolumeEmpty",
            False,
            id="volume-empty",
        ),
        pytest.param(
            {"inputs": [{"name": "m", "output": {"job": "prep", "name": "model"}}]},
            [],
            "OutputNotReady",
            False,
            id="producer-missing",
        ),
        pytest.param(
            {"inputs": [{"name": "m", "output": {"job": "prep", "name": "model"}}]},
            [("jobs", {"metadata": {"name": "prep"}, "spec": {}, "status": {"phase": "Running"}})],
            "OutputNotReady",
            False,
            id="producer-running",
        ),
        pytest.param(
            {"inputs": [{"name": "m", "output": {"job": "prep", "name": "model"}}]},
            [("jobs", {"metadata": {"name": "prep"}, "spec": {}, "status": {"phase": "Failed"}})],
            "InputUnavailable",
            True,
            id="producer-failed",
        ),
        pytest.param(
            {"outputs": [{"name": "rows", "path": "/nodus/outputs/r.csv", "sink": {"connection": "c", "table": "t"}}]},
            [("connections", {"metadata": {"name": "c"}, "spec": {"type": "S3", "s3": {}}})],
            "ConnectionTypeMismatch",
            True,
            id="sink-on-s3",
        ),
    ],
)
def test_what_cannot_be_pinned_waits_or_fails(
    spec: Object, objects: list[tuple[str, Object]], reason: str, final: bool
) -> None:
    blocked = pinning.pin(spec, lookup_of(*objects))
    assert isinstance(blocked, pinning.Blocked)
    assert (blocked.reason, blocked.final) == (reason, final)


def test_a_committed_output_is_pinned_by_its_digest() -> None:
    producer = {
        "metadata": {"name": "prep"},
        "spec": {},
        "status": {"phase": "Succeeded", "outputs": [{"name": "model", "index": 0, "sha256": DIGEST, "size": 3}]},
    }
    pins = pinning.pin(
        {"inputs": [{"name": "m", "output": {"job": "prep", "name": "model"}}]}, lookup_of(("jobs", producer))
    )
    assert isinstance(pins, pinning.Pins)
    assert pins.attempt()["inputs"] == [{"name": "m", "blob": f"sha256:{DIGEST}", "sha256": DIGEST}]
    assert pins.status()["inputs"] == [{"name": "m", "sha256": DIGEST}]


def test_a_read_only_mount_keeps_its_pinned_revision_for_replacements() -> None:
    spec = {"volumes": [{"volume": "data", "mountPath": "/data", "readOnly": True}]}
    first = pinning.pin(spec, lookup_of(("volumes", volume("data", 2))))
    assert isinstance(first, pinning.Pins)
    status = first.status()
    assert status["volumes"] == [{"volume": "data", "mountPath": "/data", "revision": 2}]
    later = pinning.pin(spec, lookup_of(("volumes", volume("data", 3))), status)
    assert isinstance(later, pinning.Pins)
    assert later.attempt()["volumes"][0]["revision"] == 2


def test_a_writable_mount_starts_from_the_latest_revision() -> None:
    spec = {"volumes": [{"volume": "data", "mountPath": "/data"}]}
    pins = pinning.pin(spec, lookup_of(("volumes", volume("data", 3))), {"volumes": []})
    assert isinstance(pins, pinning.Pins)
    assert pins.attempt()["volumes"] == [
        {"volume": "data", "mountPath": "/data", "readOnly": False, "revision": 3, "blob": f"sha256:{3:064x}"}
    ]


def test_a_secret_recreated_after_admission_is_not_read() -> None:
    admitted = {"secretVersions": {"s": 1}, "secretVersionIDs": {"s": "uid-1"}}
    blocked = pinning.pin({"env": secret_env()}, lookup_of(("secrets", secret("s", uid="uid-2"))), admitted)
    assert isinstance(blocked, pinning.Blocked)
    assert (blocked.reason, blocked.final) == ("SecretChanged", True)


def test_a_connection_pins_its_secret_too() -> None:
    connection = {
        "metadata": {"name": "warehouse"},
        "spec": {"type": "Postgres", "postgres": {"dsnSecret": "pg"}},
    }
    spec = {
        "outputs": [{"name": "rows", "path": "/nodus/outputs/r.csv", "sink": {"connection": "warehouse", "table": "t"}}]
    }
    pins = pinning.pin(spec, lookup_of(("connections", connection), ("secrets", secret("pg", versions={1: ["dsn"]}))))
    assert isinstance(pins, pinning.Pins)
    assert pins.status()["secretVersions"] == {"pg": 1}
    assert pins.attempt()["connections"] == [
        {"name": "warehouse", "type": "Postgres", "secret": {"name": "pg", "key": "dsn"}}
    ]


def workspace(name: str, revisions: int) -> Object:
    return {
        "metadata": {"name": name, "uid": f"w-{name}"},
        "status": {
            "latestRevision": revisions,
            "revisions": [
                {
                    "revision": r,
                    "digest": f"sha256:{r:064x}",
                    "mediaType": "application/vnd.nodus.checkpoint.manifest+json",
                    "size": 10,
                    "createdTime": "2026-11-29T12:00:00Z",
                    "source": "Push",
                }
                for r in range(1, revisions + 1)
            ],
        },
    }


HOME_INPUT = {"inputs": [{"name": "code", "fromWorkspace": {"name": "home", "path": "src/pkg"}}]}


def test_a_workspace_input_pins_the_latest_revision_and_its_subdirectory() -> None:
    pins = pinning.pin(HOME_INPUT, lookup_of(("workspaces", workspace("home", 3))))
    assert isinstance(pins, pinning.Pins)
    assert pins.attempt()["inputs"] == [
        {
            "name": "code",
            "blob": f"sha256:{3:064x}",
            "sha256": f"{3:064x}",
            "workspace": {"name": "home", "revision": 3, "path": "src/pkg"},
        }
    ]
    assert pins.status()["inputs"] == [{"name": "code", "sha256": f"{3:064x}", "workspaceRevision": 3}]


def test_a_replacement_mounts_the_pinned_workspace_revision_after_later_pushes() -> None:
    pinned = {"inputs": [{"name": "code", "sha256": f"{2:064x}", "workspaceRevision": 2}]}
    for later in (workspace("home", 5), None):  # pushed again since, or even deleted
        objects = [("workspaces", later)] if later is not None else []
        pins = pinning.pin(HOME_INPUT, lookup_of(*objects), pinned)
        assert isinstance(pins, pinning.Pins)
        (item,) = pins.attempt()["inputs"]
        assert (item["blob"], item["workspace"]["revision"]) == (f"sha256:{2:064x}", 2)


@pytest.mark.parametrize(
    ("objects", "reason"),
    [
        pytest.param([], "WorkspaceNotFound", id="missing"),
        pytest.param([("workspaces", workspace("home", 0))], "WorkspaceEmpty", id="empty"),
    ],
)
def test_a_workspace_input_waits_for_its_workspace(objects: list[tuple[str, Object]], reason: str) -> None:
    blocked = pinning.pin(HOME_INPUT, lookup_of(*objects))
    assert isinstance(blocked, pinning.Blocked)
    assert (blocked.reason, blocked.final) == (reason, False)
    assert "nodus workspaces push home DIR" in blocked.message
