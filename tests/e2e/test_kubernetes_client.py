"""The official kubernetes Python client: dynamic client discovery, CRUD, status, and watch."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import config, watch
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from tests.support.cluster import Cluster
from tests.support.objects import job

pytestmark = pytest.mark.e2e


@pytest.fixture
def api_client(cluster: Cluster) -> ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig("admin")))


def test_dynamic_client_discovers_and_manages_jobs(api_client: ApiClient, project: str) -> None:
    dynamic = DynamicClient(api_client)
    jobs = dynamic.resources.get(api_version="nodus.dev/v1", kind="Job")
    assert jobs.namespaced and jobs.name == "jobs"
    created = jobs.create(body=job("dyn", labels={"via": "dynamic"}), namespace=project)
    assert created.metadata.name == "dyn" and created.spec.completions == 1
    listed = jobs.get(namespace=project, label_selector="via=dynamic")
    assert [item.metadata.name for item in listed.items] == ["dyn"]
    patched = jobs.patch(
        name="dyn", namespace=project, body={"spec": {"backoffLimit": 2}}, content_type="application/merge-patch+json"
    )
    assert patched.spec.backoffLimit == 2
    with pytest.raises(ApiException) as excinfo:
        jobs.create(body=job("dyn"), namespace=project)
    assert excinfo.value.status == 409
    jobs.delete(name="dyn", namespace=project)
    with pytest.raises(ApiException) as missing:
        jobs.get(name="dyn", namespace=project)
    assert missing.value.status == 404


def test_status_subresource_is_separate_from_spec(api_client: ApiClient, project: str) -> None:
    api = CustomObjectsApi(api_client)
    api.create_namespaced_custom_object("nodus.dev", "v1", project, "jobs", job("statused"))
    current: dict[str, Any] = api.get_namespaced_custom_object("nodus.dev", "v1", project, "jobs", "statused")
    current["status"] = {"phase": "Queued", "reason": "WaitingForCapacity", "observedGeneration": 1}
    current["spec"]["backoffLimit"] = 99  # ignored on /status
    updated = api.replace_namespaced_custom_object_status("nodus.dev", "v1", project, "jobs", "statused", current)
    assert updated["status"]["phase"] == "Queued"
    assert updated["spec"]["backoffLimit"] == 6
    assert updated["metadata"]["generation"] == 1
    spec_change = {"spec": {"backoffLimit": 4}, "status": {"phase": "Failed"}}
    after = api.patch_namespaced_custom_object("nodus.dev", "v1", project, "jobs", "statused", spec_change)
    assert after["spec"]["backoffLimit"] == 4 and after["status"]["phase"] == "Queued"  # status ignored on main path
    assert after["metadata"]["generation"] == 2
    by_phase = api.list_namespaced_custom_object(
        "nodus.dev", "v1", project, "jobs", field_selector="status.phase=Queued"
    )
    assert [item["metadata"]["name"] for item in by_phase["items"]] == ["statused"]


def test_watch_streams_events(api_client: ApiClient, project: str) -> None:
    api = CustomObjectsApi(api_client)
    start = api.list_namespaced_custom_object("nodus.dev", "v1", project, "jobs")["metadata"]["resourceVersion"]
    received: list[tuple[str, str]] = []

    def produce() -> None:
        time.sleep(0.5)
        api.create_namespaced_custom_object("nodus.dev", "v1", project, "jobs", job("w1"))
        api.patch_namespaced_custom_object(
            "nodus.dev", "v1", project, "jobs", "w1", {"metadata": {"labels": {"a": "b"}}}
        )
        api.delete_namespaced_custom_object("nodus.dev", "v1", project, "jobs", "w1")

    producer = threading.Thread(target=produce)
    producer.start()
    stream = watch.Watch()
    for event in stream.stream(
        api.list_namespaced_custom_object,
        "nodus.dev",
        "v1",
        project,
        "jobs",
        resource_version=start,
        timeout_seconds=20,
    ):
        received.append((event["type"], event["object"]["metadata"]["name"]))
        if len(received) == 3:
            stream.stop()
    producer.join()
    assert received == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
