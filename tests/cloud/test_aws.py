"""The aws provider against moto's EC2 server: real boto3 calls, real HTTP, a real (if simulated) EC2.

A fixture starts moto's server on 127.0.0.1. Boots create tagged instances with user data that installs and
starts the agent, on the market the offering names; a provider that starts afresh (a new leader) adopts
instances from the Node's record and from their tags, and a sweep terminates instances no Node accounts for.
moto never runs out of capacity, so the one test of EC2's capacity refusals puts EC2's answer in front of the
provider's real client with botocore's Stubber: that stands in for AWS's reply, not for any of Nodus's code.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

from nodus.apis.v1 import accelerators
from nodus.catalog import pricebook
from nodus.cloud import awshosts
from nodus.cloud.aws import INSTANCE_ANNOTATION, REGION_ANNOTATION, AwsConfig, AwsProvider
from nodus.cloud.provider import BootRefused, Provider, Sweeping

pytestmark = pytest.mark.integration  # real programs and engines: left out of `make test-fast`

REGION = "us-east-1"
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
BOOK = pricebook.load(Path("aws"), accelerators.CATALOG).by_name()


@pytest.fixture(scope="module")
def ec2_endpoint() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")):
        monkeypatch.setenv(name, value)


@pytest.fixture
def ec2(ec2_endpoint: str) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=ec2_endpoint)


@pytest.fixture
def image(ec2: Any) -> str:
    return str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


def config(endpoint: str, image: str, cluster: str, **overrides: Any) -> AwsConfig:
    bootstrap = awshosts.Bootstrap(
        server="https://api.example:6443", ca_pem=CA_PEM, agent_flags=("--runtime", "podman")
    )
    return AwsConfig(cluster=cluster, bootstrap=bootstrap, images={REGION: image}, endpoint_url=endpoint, **overrides)


@pytest.fixture
def cluster() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def provider(ec2_endpoint: str, image: str, cluster: str) -> AwsProvider:
    return AwsProvider(config(ec2_endpoint, image, cluster))


def node(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": str(uuid.uuid4()), "annotations": annotations or {}},
        "spec": {"offering": "cpu-8c-us-spot", "provider": "aws"},
        "status": {"phase": "Booting"},
    }


def instances(ec2: Any, cluster: str, *states: str) -> list[dict[str, Any]]:
    filters = [{"Name": "tag:nodus.dev/cluster", "Values": [cluster]}]
    if states:
        filters.append({"Name": "instance-state-name", "Values": list(states)})
    pages = ec2.describe_instances(Filters=filters)["Reservations"]
    return [instance for reservation in pages for instance in reservation["Instances"]]


def alive(ec2: Any, cluster: str) -> list[dict[str, Any]]:
    return instances(ec2, cluster, "pending", "running")


def test_is_a_provider_that_sweeps(provider: AwsProvider) -> None:
    checked: Provider = provider
    assert isinstance(checked, Sweeping)
    assert checked.name == "aws"


async def test_boot_starts_one_tagged_spot_instance_whose_user_data_starts_the_agent(
    provider: AwsProvider, ec2: Any, cluster: str
) -> None:
    host = node("cpu-8c-us-spot-a1")
    await provider.boot(host, BOOK["cpu-8c-us-spot"].body(), "abc123.secretsecretsecre")
    [instance] = alive(ec2, cluster)
    assert instance["InstanceType"] == "m7i.2xlarge"
    assert instance["InstanceLifecycle"] == "spot"
    tags = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
    assert tags[awshosts.NODE_TAG] == "cpu-8c-us-spot-a1"
    assert tags[awshosts.NODE_UID_TAG] == host["metadata"]["uid"]
    assert tags["Name"] == f"nodus-{cluster}-cpu-8c-us-spot-a1"
    data = ec2.describe_instance_attribute(InstanceId=instance["InstanceId"], Attribute="userData")
    script = base64.b64decode(data["UserData"]["Value"]).decode()
    assert script.startswith("#!/bin/sh\n")
    assert CA_PEM.strip() in script
    assert "printf '%s\\n' abc123.secretsecretsecre > /etc/nodus/join-token" in script
    assert (
        "ExecStart=/opt/nodus/bin/nodus agent --server https://api.example:6443 --certificate-authority "
        "/etc/nodus/ca.crt --join-token-file /etc/nodus/join-token --node-name cpu-8c-us-spot-a1 --offering "
        "cpu-8c-us-spot --metadata-url http://169.254.169.254 --runtime podman"
    ) in script
    assert provider.is_up("cpu-8c-us-spot-a1")
    assert provider.annotations("cpu-8c-us-spot-a1") == {
        INSTANCE_ANNOTATION: instance["InstanceId"],
        REGION_ANNOTATION: REGION,
    }

    # A boot asked again, by this controller or a new one, finds the instance rather than starting another.
    await provider.boot(host, BOOK["cpu-8c-us-spot"].body(), "abc123.secretsecretsecre")
    again = AwsProvider(provider.config)
    await again.boot(host, BOOK["cpu-8c-us-spot"].body(), "abc123.secretsecretsecre")
    assert [i["InstanceId"] for i in alive(ec2, cluster)] == [instance["InstanceId"]]


async def test_an_on_demand_offering_is_no_spot_instance(provider: AwsProvider, ec2: Any, cluster: str) -> None:
    await provider.boot(node("g5-x1"), BOOK["a10g-24g-x1-us"].body(), "abc123.secretsecretsecre")
    [instance] = alive(ec2, cluster)
    assert instance["InstanceType"] == "g5.4xlarge"
    assert "InstanceLifecycle" not in instance


async def test_terminate_ends_the_instance_tracked_or_found_by_its_tags(
    provider: AwsProvider, ec2: Any, cluster: str
) -> None:
    offering = BOOK["cpu-8c-us"].body()
    await provider.boot(node("n1"), offering, "abc123.secretsecretsecre")
    await provider.boot(node("n2"), offering, "abc123.secretsecretsecre")
    await provider.terminate("n1", 0)
    assert not provider.is_up("n1")
    # A controller that never tracked n2 (it restarted before n2's Node recorded its instance) finds it by its tags.
    await AwsProvider(provider.config).terminate("n2", 0)
    assert alive(ec2, cluster) == []
    await provider.terminate("n1", 0)  # idempotent


async def test_kill_terminates_at_once_in_the_background(provider: AwsProvider, ec2: Any, cluster: str) -> None:
    await provider.boot(node("doomed"), BOOK["cpu-8c-us"].body(), "abc123.secretsecretsecre")
    assert provider.kill("doomed")
    assert not provider.kill("never-booted")
    for _ in range(100):
        if not alive(ec2, cluster):
            break
        await asyncio.sleep(0.05)
    assert alive(ec2, cluster) == []


async def test_a_new_controller_adopts_from_the_nodes_record_or_from_the_tags(
    provider: AwsProvider, ec2: Any, cluster: str
) -> None:
    recorded, unrecorded = node("recorded"), node("unrecorded")
    for host in (recorded, unrecorded):
        await provider.boot(host, BOOK["cpu-8c-us"].body(), "abc123.secretsecretsecre")
    recorded["metadata"]["annotations"] = provider.annotations("recorded")

    successor = AwsProvider(provider.config)
    assert successor.adopt(recorded)
    assert not successor.adopt(recorded), "an instance it tracks is not adopted twice"
    assert not successor.adopt(unrecorded), "nothing on the Node to adopt from"
    known = {h["metadata"]["name"]: h["metadata"]["uid"] for h in (recorded, unrecorded)}
    assert await successor.sweep(known) == []
    assert successor.is_up("unrecorded")
    assert successor.annotations("unrecorded") == provider.annotations("unrecorded")
    assert len(alive(ec2, cluster)) == 2, "adopting starts and stops nothing"


async def test_a_sweep_terminates_instances_no_node_accounts_for(
    ec2_endpoint: str, image: str, ec2: Any, cluster: str
) -> None:
    provider = AwsProvider(config(ec2_endpoint, image, cluster, sweep_grace=timedelta(0)))
    kept, deleted, replaced = node("kept"), node("deleted"), node("replaced")
    for host in (kept, deleted, replaced):
        await provider.boot(host, BOOK["cpu-8c-us"].body(), "abc123.secretsecretsecre")
    other_cluster = AwsProvider(config(ec2_endpoint, image, f"{cluster}-other", sweep_grace=timedelta(0)))
    await other_cluster.boot(node("theirs"), BOOK["cpu-8c-us"].body(), "abc123.secretsecretsecre")

    # "deleted" has no Node any more; "replaced" is a Node of the same name created again (another uid).
    known = {"kept": kept["metadata"]["uid"], "replaced": str(uuid.uuid4())}
    assert sorted(await provider.sweep(known)) == ["deleted", "replaced"]
    [left] = alive(ec2, cluster)
    assert {tag["Value"] for tag in left["Tags"] if tag["Key"] == awshosts.NODE_TAG} == {"kept"}
    assert not provider.is_up("deleted")
    assert len(alive(ec2, f"{cluster}-other")) == 1, "another cluster's instances are never touched"

    # A young instance is spared: its Node may not have reached the controller's cache yet.
    patient = AwsProvider(config(ec2_endpoint, image, cluster))
    await patient.boot(node("young"), BOOK["cpu-8c-us"].body(), "abc123.secretsecretsecre")
    assert await patient.sweep(known) == []
    assert len(alive(ec2, cluster)) == 2


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        pytest.param("InsufficientInstanceCapacity", "CapacityBusy", id="insufficient-instance-capacity"),
        pytest.param("InsufficientCapacity", "CapacityBusy", id="insufficient-capacity"),
        pytest.param("SpotMaxPriceTooLow", "CapacityBusy", id="spot-price"),
        pytest.param("MaxSpotInstanceCountExceeded", "CapacityBusy", id="spot-count"),
        pytest.param("VcpuLimitExceeded", "CapacityBusy", id="vcpu-quota"),
        pytest.param("InvalidAMIID.NotFound", "BootFailed", id="bad-ami"),
        pytest.param("RequestLimitExceeded", None, id="throttled-is-retried"),
    ],
)
async def test_ec2s_refusals_become_the_nodes_reason(provider: AwsProvider, code: str, reason: str | None) -> None:
    client = provider._ec2(REGION)
    with Stubber(client) as stub:
        stub.add_response("describe_instances", {"Reservations": []})
        stub.add_client_error("run_instances", service_error_code=code, service_message=f"{code} (from AWS)")
        with pytest.raises((BootRefused, botocore.exceptions.ClientError)) as raised:
            await provider.boot(node("unlucky"), BOOK["a10g-24g-x1-us-spot"].body(), "abc123.secretsecretsecre")
    if reason is None:
        assert isinstance(raised.value, botocore.exceptions.ClientError)
        return
    assert isinstance(raised.value, BootRefused)
    assert raised.value.reason == reason
    assert code in raised.value.message and "g5.4xlarge" in raised.value.message
    assert not provider.is_up("unlucky")


async def test_offerings_it_cannot_boot_are_refused_with_the_fix(provider: AwsProvider) -> None:
    sim = pricebook.load(None, accelerators.CATALOG).by_name()["cpu-8c-us"].body()
    with pytest.raises(BootRefused, match="names no instanceType"):
        await provider.boot(node("x"), sim, "abc123.secretsecretsecre")
    with pytest.raises(BootRefused, match="--aws-image"):
        await provider.boot(node("y"), BOOK["cpu-8c-eu"].body(), "abc123.secretsecretsecre")


def test_capacity_is_zero_where_it_has_no_image_and_else_as_configured(
    ec2_endpoint: str, image: str, cluster: str
) -> None:
    provider = AwsProvider(config(ec2_endpoint, image, cluster, capacity_overrides={"cpu-8c-us": 2}))
    assert provider.capacity(BOOK["cpu-8c-us"].body()) == 2
    assert provider.capacity(BOOK["cpu-32c-us"].body()) is None
    assert provider.capacity(BOOK["cpu-8c-eu"].body()) == 0
    sim = pricebook.load(None, accelerators.CATALOG).by_name()["cpu-8c-us"].body()
    assert provider.capacity(sim) == 0


def test_user_data_wants_a_pem_ca() -> None:
    with pytest.raises(ValueError, match="PEM"):
        awshosts.Bootstrap(server="https://x", ca_pem="not a certificate").user_data("n", "o", "t.t")
