"""Health endpoints answer anyone; /metrics and /readyz?verbose answer monitoring callers only (issue 15 §5)."""

from __future__ import annotations

import httpx
import pytest

from tests.support.cluster import Cluster

pytestmark = pytest.mark.e2e
GUARDED = [("/metrics", {}), ("/readyz", {"verbose": ""})]


@pytest.mark.parametrize(("path", "params"), GUARDED, ids=["metrics", "readyz-verbose"])
def test_what_the_server_is_doing_needs_a_monitoring_caller(
    cluster: Cluster, path: str, params: dict[str, str]
) -> None:
    with httpx.Client(base_url=cluster.url, verify=cluster.tls()) as anonymous:
        unauthenticated = anonymous.get(path, params=params)
    assert unauthenticated.status_code == 401, unauthenticated.text
    assert unauthenticated.json()["reason"] == "Unauthorized"
    with cluster.client("bob") as bob:  # a project member, not a monitoring caller
        forbidden = bob.get(path, params=params)
    assert forbidden.status_code == 403
    body = forbidden.json()
    assert body["reason"] == "Forbidden" and f'cannot get path "{path}"' in body["message"]
    assert "system:monitoring" in body["fix"]
    for reader in ("prometheus", "admin"):
        with cluster.client(reader) as client:
            allowed = client.get(path, params=params)
        assert allowed.status_code == 200, (reader, allowed.text)
        assert "nodus_apiserver_requests_total" in allowed.text or "readyz check passed" in allowed.text


@pytest.mark.parametrize("path", ["/livez", "/healthz", "/readyz", "/version"])
def test_probes_and_version_stay_open(cluster: Cluster, path: str) -> None:
    with httpx.Client(base_url=cluster.url, verify=cluster.tls()) as anonymous:
        response = anonymous.get(path)
    assert response.status_code == 200
    assert response.text == "ok" or response.json()["major"] == "1"
