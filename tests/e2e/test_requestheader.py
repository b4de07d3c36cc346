"""Behind kube-apiserver aggregation: the X-Remote-* headers are trusted only from the front proxy.

The front proxy is recognised by a TLS client certificate signed by the requestheader CA whose
common name is an allowed name. Anyone else sending the headers is not believed.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nodus.cli import certificates
from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support.objects import jobs_path

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def proxied(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[clusters.Cluster, Path]]:
    directory = tmp_path_factory.mktemp("requestheader")
    front_proxy = directory / "front-proxy"
    certificates.ensure_ca(front_proxy, "front-proxy-ca")
    running = clusters.start(
        directory / "server",
        database_url,
        extra_args=(
            "--requestheader-client-ca-file", str(front_proxy / "ca.crt"),
            "--requestheader-allowed-names", "front-proxy-client",
        ),
        migrate=False,
    )  # fmt: skip
    yield running, front_proxy
    running.stop()


def _client_cert(directory: Path, common_name: str, ca_dir: Path) -> tuple[str, str]:
    cert, key = certificates.issue(certificates.ensure_ca(ca_dir, "unused"), common_name, [], client=True)
    cert_file, key_file = directory / f"{common_name}.crt", directory / f"{common_name}.key"
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    return str(cert_file), str(key_file)


def _as(cluster: clusters.Cluster, cert: tuple[str, str] | None, headers: dict[str, str]) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    if cert is not None:
        context.load_cert_chain(*cert)
    return httpx.Client(base_url=cluster.url, verify=context, headers=headers, timeout=30)


def test_front_proxy_identity_is_trusted(proxied: tuple[clusters.Cluster, Path], tmp_path: Path) -> None:
    cluster, ca_dir = proxied
    with cluster.client("admin") as admin:
        project = make_project(admin, [{"name": "alice", "role": "Viewer"}])
    cert = _client_cert(tmp_path, "front-proxy-client", ca_dir)
    with _as(cluster, cert, {"X-Remote-User": "alice", "X-Remote-Group": "developers"}) as alice:
        assert alice.get(jobs_path(project)).status_code == 200
        denied = alice.post(jobs_path(project), json={})
        assert denied.status_code == 403 and 'User "alice"' in denied.json()["message"]
    with _as(cluster, cert, {"X-Remote-User": "mallory", "X-Remote-Group": "system:masters"}) as admin_by_proxy:
        assert admin_by_proxy.get(jobs_path(project)).status_code == 200  # the proxy vouches for the groups


def test_headers_without_the_front_proxy_certificate_are_ignored(
    proxied: tuple[clusters.Cluster, Path], tmp_path: Path
) -> None:
    cluster, ca_dir = proxied
    spoof = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    with _as(cluster, None, spoof) as anonymous:
        assert anonymous.get("/apis/nodus.dev/v1/jobs").status_code == 401
    wrong_name = _client_cert(tmp_path, "someone-else", ca_dir)
    with _as(cluster, wrong_name, spoof) as impostor:
        assert impostor.get("/apis/nodus.dev/v1/jobs").status_code == 401
    foreign_ca = tmp_path / "foreign"
    foreign = _client_cert(tmp_path, "front-proxy-client", foreign_ca)
    # The TLS layer refuses a certificate from another CA.
    with pytest.raises(httpx.HTTPError), _as(cluster, foreign, spoof) as forged:
        forged.get("/apis/nodus.dev/v1/jobs")
