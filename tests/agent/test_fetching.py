"""Input downloads against a real HTTPS server (own test CA) and a real S3-compatible server (moto).

Both listen on this machine's loopback, so most tests run with the policy of an agent started with
``--allow-loopback-endpoints``; the destination tests run without it too (ADR 0032).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from nodus.agent import fetching
from nodus.apimachinery import destinations
from tests.agent.support_https import HttpsServer

# An agent started with --allow-loopback-endpoints (its API server elsewhere).
LOCAL = destinations.Policy(allow_loopback=True)
BODY = os.urandom(2 * fetching.CHUNK + 123)
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsServer]:
    root = tmp_path_factory.mktemp("served")
    (root / "blob.bin").write_bytes(BODY)
    with HttpsServer(root, tmp_path_factory.mktemp("certs")) as server:
        server.redirects["/moved"] = "/blob.bin"
        server.redirects["/downgrade"] = "http://localhost:1/blob.bin"
        server.redirects["/metadata"] = "https://169.254.169.254/latest/meta-data/iam/security-credentials/"
        server.redirects["/decimal"] = "https://2130706433:5432/"
        yield server


async def test_download_with_the_right_digest(https: HttpsServer, tmp_path: Path) -> None:
    target = tmp_path / "blob.bin"
    digest = await fetching.download(
        f"{https.url}/blob.bin", target, SHA.upper(), policy=LOCAL, ca_file=str(https.ca_file)
    )
    assert digest == SHA
    assert target.read_bytes() == BODY
    assert os.listdir(tmp_path) == ["blob.bin"]


async def test_download_without_a_digest_returns_it(https: HttpsServer, tmp_path: Path) -> None:
    digest = await fetching.download(
        f"{https.url}/blob.bin", tmp_path / "b", None, policy=LOCAL, ca_file=str(https.ca_file)
    )
    assert digest == SHA


async def test_a_wrong_digest_names_both_and_leaves_nothing(https: HttpsServer, tmp_path: Path) -> None:
    wrong = "0" * 64
    url = f"{https.url}/blob.bin"
    with pytest.raises(fetching.DigestMismatch) as caught:
        await fetching.download(url, tmp_path / "blob.bin", f"sha256:{wrong}", policy=LOCAL, ca_file=str(https.ca_file))
    assert str(caught.value) == f"sha256 of {url} is {SHA}, expected {wrong}"
    assert os.listdir(tmp_path) == []


async def test_https_redirects_are_followed(https: HttpsServer, tmp_path: Path) -> None:
    assert (
        await fetching.download(f"{https.url}/moved", tmp_path / "b", SHA, policy=LOCAL, ca_file=str(https.ca_file))
        == SHA
    )


async def test_a_redirect_to_http_is_refused(https: HttpsServer, tmp_path: Path) -> None:
    with pytest.raises(fetching.FetchError, match="only https://"):
        await fetching.download(f"{https.url}/downgrade", tmp_path / "b", SHA, policy=LOCAL, ca_file=str(https.ca_file))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "url", ["http://localhost/blob.bin", "ftp://example.com/x", "file:///etc/passwd", "s3://bucket/key"]
)
async def test_other_schemes_are_refused(url: str, tmp_path: Path) -> None:
    with pytest.raises(fetching.FetchError, match="only https://"):
        await fetching.download(url, tmp_path / "b", None, policy=LOCAL)


async def test_the_server_certificate_is_verified(https: HttpsServer, tmp_path: Path) -> None:
    with pytest.raises(fetching.FetchError, match="failed"):
        await fetching.download(f"{https.url}/blob.bin", tmp_path / "b", None, policy=LOCAL)  # system CAs only
    assert os.listdir(tmp_path) == []


async def test_a_missing_file_is_a_fetch_error(https: HttpsServer, tmp_path: Path) -> None:
    with pytest.raises(fetching.FetchError, match="answered 404"):
        await fetching.download(
            f"{https.url}/nope?token=secret", tmp_path / "b", None, policy=LOCAL, ca_file=str(https.ca_file)
        )


# --- Destinations (ADR 0032): the local server is this host, which an agent reaches only when told to.


async def test_a_loopback_url_is_refused_without_the_loopback_flag(https: HttpsServer, tmp_path: Path) -> None:
    # https.url is https://localhost:PORT: a name that resolves to 127.0.0.1.
    with pytest.raises(destinations.Refused, match=r"^localhost is loopback \(this host\): refused$"):
        await fetching.download(f"{https.url}/blob.bin", tmp_path / "b", SHA, policy=destinations.Policy())
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param(
            "/metadata", "169.254.169.254 is link-local (the cloud metadata service): refused", id="metadata-service"
        ),
        pytest.param("/decimal", "127.0.0.1:5432 is the control plane's own endpoint", id="decimal-control-plane"),
    ],
)
async def test_a_redirect_to_a_refused_destination_is_refused(
    https: HttpsServer, tmp_path: Path, path: str, message: str
) -> None:
    policy = LOCAL.forbid(destinations.Endpoint.parse("127.0.0.1:5432"))
    with pytest.raises(destinations.Refused) as caught:
        await fetching.download(f"{https.url}{path}", tmp_path / "b", SHA, policy=policy, ca_file=str(https.ca_file))
    assert f"{https.url}{path} redirects to https://" in str(caught.value)
    assert message in str(caught.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        pytest.param(LOCAL.with_egress("Deny"), "egress policy is Deny", id="egress-deny"),
        pytest.param(LOCAL.with_egress("AllowList", ["pypi.org"]), "not in the Job's egress allow list", id="allow"),
    ],
)
async def test_the_jobs_egress_policy_governs_downloads(
    https: HttpsServer, tmp_path: Path, policy: destinations.Policy, message: str
) -> None:
    with pytest.raises(destinations.Refused, match=message):
        await fetching.download(f"{https.url}/blob.bin", tmp_path / "b", SHA, policy=policy, ca_file=str(https.ca_file))


async def test_an_allow_listed_host_is_downloaded(https: HttpsServer, tmp_path: Path) -> None:
    policy = LOCAL.with_egress("AllowList", ["localhost"])
    url = f"{https.url}/blob.bin"
    assert await fetching.download(url, tmp_path / "b", SHA, policy=policy, ca_file=str(https.ca_file)) == SHA


def test_messages_never_show_credentials() -> None:
    assert fetching.redact("https://user:token@host.example/a/b?X-Amz-Signature=s") == "https://host.example/a/b?…"


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        pytest.param("s3://bucket/key", ("bucket", "key"), id="simple"),
        pytest.param("s3://bucket/a/b/c.bin", ("bucket", "a/b/c.bin"), id="nested"),
    ],
)
def test_parse_s3_uri(uri: str, parsed: tuple[str, str]) -> None:
    assert fetching.parse_s3_uri(uri) == parsed


@pytest.mark.parametrize("uri", ["s3://bucket", "s3://bucket/", "s3:///key", "https://bucket/key"])
def test_parse_s3_uri_refuses(uri: str) -> None:
    with pytest.raises(ValueError):
        fetching.parse_s3_uri(uri)


# --- S3 against moto's server, with IAM authentication switched on so signatures are checked.

REGION = "us-east-1"
KEY = "data/train set+1.bin"


class S3:
    def __init__(self, endpoint: str, access_key: str, secret_key: str) -> None:
        self.endpoint, self.access_key, self.secret_key = endpoint, access_key, secret_key


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bootstrap = {"aws_access_key_id": "bootstrap", "aws_secret_access_key": "bootstrap", "region_name": REGION}
    iam = boto3.client("iam", endpoint_url=endpoint, **bootstrap)
    iam.create_user(UserName="reader")
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    client = boto3.client("s3", endpoint_url=endpoint, **bootstrap)
    client.create_bucket(Bucket="inputs")
    client.put_object(Bucket="inputs", Key=KEY, Body=BODY)
    httpx.post(f"{endpoint}/moto-api/reset-auth", content=b"0").raise_for_status()
    try:
        yield S3(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        httpx.post(f"{endpoint}/moto-api/reset-auth", content=b"inf").raise_for_status()
        server.stop()


async def test_s3_object_downloads_with_its_digest(s3: S3, tmp_path: Path) -> None:
    target = tmp_path / "train.bin"
    digest = await fetching.download_s3(
        s3.endpoint, REGION, "inputs", KEY, s3.access_key, s3.secret_key, None, target, SHA, policy=LOCAL
    )
    assert digest == SHA
    assert target.read_bytes() == BODY


async def test_s3_wrong_secret_is_a_clear_error(s3: S3, tmp_path: Path) -> None:
    with pytest.raises(fetching.FetchError) as caught:
        await fetching.download_s3(
            s3.endpoint,
            REGION,
            "inputs",
            KEY,
            s3.access_key,
            "not-the-secret",
            None,
            tmp_path / "x",
            None,
            policy=LOCAL,
        )
    message = str(caught.value)
    assert "answered 403: SignatureDoesNotMatch" in message
    assert "not-the-secret" not in message
    assert os.listdir(tmp_path) == []


async def test_s3_wrong_digest_leaves_nothing(s3: S3, tmp_path: Path) -> None:
    with pytest.raises(
        fetching.DigestMismatch, match=re.escape(f"sha256 of s3://inputs/{KEY} is {SHA}, expected {'0' * 64}")
    ):
        await fetching.download_s3(
            s3.endpoint,
            REGION,
            "inputs",
            KEY,
            s3.access_key,
            s3.secret_key,
            None,
            tmp_path / "x",
            "0" * 64,
            policy=LOCAL,
        )
    assert os.listdir(tmp_path) == []


async def test_an_s3_endpoint_on_loopback_is_refused_without_the_flag(s3: S3, tmp_path: Path) -> None:
    with pytest.raises(destinations.Refused, match=r"127\.0\.0\.1 is loopback"):
        await fetching.download_s3(
            s3.endpoint, REGION, "inputs", KEY, s3.access_key, s3.secret_key, None, tmp_path / "x", SHA,
            policy=destinations.Policy(),
        )  # fmt: skip
    assert os.listdir(tmp_path) == []


async def test_s3_over_http_only_on_loopback(tmp_path: Path) -> None:
    with pytest.raises(fetching.FetchError, match="must be https://"):
        await fetching.download_s3(
            "http://s3.example.com", REGION, "b", "k", "AKIA", "secret", None, tmp_path / "x", None, policy=LOCAL
        )
