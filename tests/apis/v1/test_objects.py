"""Typed views of stored objects: the server's models, read as a client reads (unknown fields ignored,
stored defaults seen, an object that no longer validates read without wedging its reader)."""

from __future__ import annotations

import copy
from typing import Any

import pydantic
import pytest

from nodus.api.kinds.job import defaults
from nodus.apis.v1 import objects
from nodus.apis.v1.jobspec import JobSpec


def stored_job(uid: str = "uid-1", rv: str = "7", **spec: Any) -> dict[str, Any]:
    body = {"image": "python:3.11", "command": ["python", "-c", "pass"], **spec}
    defaults.apply_defaults(body)
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "p",
            "uid": uid,
            "resourceVersion": rv,
            "generation": 2,
            "labels": {"team": "a"},
            "finalizers": ["nodus.dev/stop-attempts"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "o-1", "controller": True}],
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": body,
        "status": {"phase": "Running", "observedGeneration": 2},
    }


def test_a_stored_job_reads_with_the_defaults_the_server_wrote() -> None:
    job = objects.read(objects.Job, stored_job(completions=4))
    assert (job.spec.completions, job.spec.parallelism, job.spec.backoff_limit) == (4, 1, 6)
    assert job.spec.recovery.max_attempts == 3
    assert job.status.phase == "Running"
    assert job.metadata.labels == {"team": "a"} and job.metadata.annotations == {}
    assert job.metadata.finalizers == ("nodus.dev/stop-attempts",)
    assert job.metadata.controller_uid() == "o-1"


def test_fields_a_newer_server_added_are_ignored() -> None:
    obj = stored_job()
    obj["spec"]["somethingNew"] = {"a": 1}
    obj["spec"]["recovery"]["alsoNew"] = True
    obj["status"]["newStatusField"] = "x"
    job = objects.read(objects.Job, obj)
    assert job.spec.image == "python:3.11"


def test_a_request_with_an_unknown_field_is_still_refused_by_the_server_model() -> None:
    with pytest.raises(pydantic.ValidationError):
        JobSpec.model_validate({"image": "python:3.11", "somethingNew": 1})


def test_an_object_stored_under_older_rules_reads_its_valid_fields() -> None:
    obj = stored_job(uid="old")
    obj["spec"]["completions"] = "many"  # no longer valid
    obj["status"]["conditions"] = [{"type": "Admitted", "status": "Maybe"}, {"type": "Funded", "status": "True"}]
    before = copy.deepcopy(obj)
    job = objects.read(objects.Job, obj)
    assert job.spec.completions == 1  # the declared default
    assert job.spec.image == "python:3.11"
    assert [c.type for c in job.status.conditions or ()] == ["Funded"]
    assert obj == before  # never mutated


def test_json_that_is_not_a_job_raises() -> None:
    with pytest.raises(pydantic.ValidationError):
        objects.read(objects.Job, {"metadata": {"name": "x"}})


def test_views_are_read_only() -> None:
    job = objects.read(objects.Job, stored_job(uid="ro"))
    with pytest.raises(pydantic.ValidationError):
        job.spec.parallelism = 3  # type: ignore[misc]


def test_one_stored_version_is_parsed_once() -> None:
    first = objects.read(objects.Job, stored_job(uid="cached", rv="1"))
    assert objects.read(objects.Job, stored_job(uid="cached", rv="1")) is first
    assert objects.read(objects.Job, stored_job(uid="cached", rv="2")) is not first
    without_version = stored_job(uid="", rv="")
    assert objects.read(objects.Job, without_version) is not objects.read(objects.Job, without_version)


def test_the_cache_keys_on_the_kind_too() -> None:
    node = {
        "metadata": {"name": "n", "uid": "same", "resourceVersion": "1"},
        "spec": {"offering": "o"},
        "status": {"phase": "Ready"},
    }
    assert objects.read(objects.Node, node).status.phase == "Ready"
    lease = {"metadata": {"name": "n", "uid": "same", "resourceVersion": "1"}, "spec": {"holderIdentity": "a"}}
    assert objects.read(objects.Lease, lease).spec.holder_identity == "a"
