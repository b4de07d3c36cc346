"""Every error is a metav1.Status with a registered reason, docs, a fix and a request id."""

from __future__ import annotations

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.objects import API, job, jobs_path

pytestmark = pytest.mark.e2e


def _assert_status(response: httpx.Response, code: int, reason: str) -> dict[str, object]:
    assert response.status_code == code, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == code and body["reason"] == reason
    assert body["requestId"] == response.headers["x-request-id"]
    assert isinstance(body["fix"], str) and body["fix"]
    assert isinstance(body["docs"], str) and "/docs/reasons/" in body["docs"]
    assert "Traceback" not in response.text
    return body  # type: ignore[no-any-return]


def test_docs_links_are_served(admin: httpx.Client, project: str) -> None:
    body = _assert_status(admin.get(jobs_path(project, "missing")), 404, "NotFound")
    page = admin.get(str(body["docs"]))
    assert page.status_code == 200 and "NotFound" in page.text and "How to fix it" in page.text


def test_all_validation_errors_come_together(admin: httpx.Client, project: str) -> None:
    bad = job("bad", completions=0, parallelism=300, backoffLimit=101, env=[{"name": "1BAD", "value": "x"}])
    bad["spec"]["resources"]["gpu"]["count"] = 3
    body = _assert_status(admin.post(jobs_path(project), json=bad), 422, "Invalid")
    fields = {cause["field"] for cause in body["details"]["causes"]}  # type: ignore[index]
    assert {"spec.completions", "spec.backoffLimit", "spec.env[0].name", "spec.resources.gpu.count"} <= fields
    assert body["details"]["kind"] == "Job" and body["details"]["name"] == "bad"  # type: ignore[index]


def test_field_validation_modes(admin: httpx.Client, project: str) -> None:
    raw = (
        b'{"apiVersion":"nodus.dev/v1","kind":"Job","metadata":{"name":"fv"},"spec":{"image":"x","command":["x"],'
        b'"bogus":1,"backoffLimit":1,"backoffLimit":2,"resources":{"gpu":{"type":["H100"],"count":1}}}}'
    )
    headers = {"Content-Type": "application/json"}
    strict = admin.post(jobs_path(project), content=raw, headers=headers, params={"fieldValidation": "Strict"})
    body = _assert_status(strict, 400, "BadRequest")
    assert 'unknown field "spec.bogus"' in str(body["message"]) and 'duplicate field "spec.backoffLimit"' in str(
        body["message"]
    )
    warned = admin.post(jobs_path(project), content=raw, headers=headers, params={"fieldValidation": "Warn"})
    assert warned.status_code == 201, warned.text
    warnings = warned.headers.get_list("warning")
    assert any('unknown field \\"spec.bogus\\"' in w for w in warnings), warnings
    assert "bogus" not in warned.json()["spec"] and warned.json()["spec"]["backoffLimit"] == 2
    ignored = admin.post(
        jobs_path(project),
        content=raw.replace(b'"fv"', b'"fv2"'),
        headers=headers,
        params={"fieldValidation": "Ignore"},
    )
    assert ignored.status_code == 201 and not ignored.headers.get_list("warning")


def test_strategic_merge_patch_is_415(admin: httpx.Client, project: str) -> None:
    admin.post(jobs_path(project), json=job("smp")).raise_for_status()
    response = admin.patch(
        jobs_path(project, "smp"),
        json={"spec": {"backoffLimit": 1}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    body = _assert_status(response, 415, "UnsupportedMediaType")
    assert "merge-patch" in str(body["message"])


def test_bad_requests(admin: httpx.Client, project: str) -> None:
    _assert_status(admin.get(jobs_path(project), params={"labelSelector": "a in (b"}), 400, "BadRequest")
    _assert_status(admin.get(jobs_path(project), params={"fieldSelector": "spec.image=x"}), 400, "BadRequest")
    _assert_status(admin.get(jobs_path(project), params={"shardSelector": "x"}), 400, "BadRequest")
    _assert_status(admin.get(jobs_path(project), params={"continue": "garbage"}), 400, "BadRequest")
    _assert_status(
        admin.post(jobs_path(project), content=b"{not json", headers={"Content-Type": "application/json"}),
        400,
        "BadRequest",
    )
    _assert_status(admin.get(f"{API}/widgets"), 404, "NotFound")
    _assert_status(admin.post(jobs_path("no-such-project"), json=job("orphan")), 404, "NotFound")
    _assert_status(
        admin.get(jobs_path(project), headers={"Accept": "application/vnd.kubernetes.protobuf"}), 406, "NotAcceptable"
    )
    admin.post(jobs_path(project), json=job("dup")).raise_for_status()
    _assert_status(admin.post(jobs_path(project), json=job("dup")), 409, "AlreadyExists")


def test_discovery_and_version(cluster: Cluster, admin: httpx.Client) -> None:
    assert admin.get("/version").json()["major"] == "1"
    assert admin.get("/api").json() == {"kind": "APIVersions", "versions": [], "serverAddressByClientCIDRs": []}
    assert admin.get("/api/v1").json()["resources"] == []
    groups = admin.get("/apis").json()
    assert groups["groups"][0]["name"] == "nodus.dev"
    aggregated = admin.get(
        "/apis", headers={"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}
    )
    assert aggregated.headers["content-type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
    resources = aggregated.json()["items"][0]["versions"][0]["resources"]
    assert {r["resource"] for r in resources} >= {"jobs", "projects"}
    for path in ("/healthz", "/livez", "/readyz"):
        assert admin.get(path).text == "ok"
    metrics = admin.get("/metrics").text
    assert "nodus_apiserver_requests_total" in metrics


@pytest.mark.parametrize(
    "path",
    [
        "/namespaces/a%00b/jobs",
        "/namespaces/a%00b/jobs?watch=1",
        "/namespaces/{project}/jobs/x%00y",
        "/namespaces/{project}/jobs/x%00y/status",
        "/watch/namespaces/a%00b/jobs",
        "/projects/a%00b",
    ],
)
def test_a_nul_in_a_path_is_not_found(admin: httpx.Client, project: str, path: str) -> None:
    """No name or project can hold a NUL: every read of one, a list or watch included, is a 404 Status (never a
    dropped connection or a 500)."""
    _assert_status(admin.get(API + path.format(project=project)), 404, "NotFound")
