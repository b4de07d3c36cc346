"""Amazon EC2 as a provider: every host is an instance, on demand or spot, started with ``boto3``.

An Offering of the AWS price book (``nodus/catalog/pricebook-aws.yaml``) names an instance type
(``spec.instanceType``) and an AWS region (``spec.region``); an interruptible one is bought as a one-time spot
instance (``InstanceMarketOptions``) that EC2 terminates when it reclaims it. ``boot`` runs one instance with the
user data of :mod:`nodus.cloud.awshosts` (it installs and starts the agent, which joins with the Node's bootstrap
token), tagged with the cluster, the node name and the Node's uid (ADR 0049):

* Idempotent: a boot first looks for a live instance with the Node's tags, and ``RunInstances`` carries a
  ``ClientToken`` derived from the Node's uid, so neither a retried call nor a controller that died mid-way
  starts a second instance.
* Adoptable: a new leader tracks an instance from the Node's annotations (:meth:`AwsProvider.annotations`:
  its id and region) or, when the Node has none yet, from the tags (:meth:`AwsProvider.sweep`).
* Never leaked: :meth:`AwsProvider.sweep` terminates every instance of the cluster whose Node no longer exists
  (deleted while no controller led, or never recorded); ``terminate`` finds an untracked instance by its tags.

EC2's refusals for want of capacity (``InsufficientInstanceCapacity`` and its kin, spot price and count limits,
vCPU quotas) become :class:`~nodus.cloud.provider.BootRefused` with reason ``CapacityBusy``: the Node fails,
its attempt is lost with that reason and placed again elsewhere (it avoids the offering). A refusal of the
request itself (an unknown AMI, subnet or profile) is ``BootFailed`` with EC2's message, for the operator to fix.
Throttling and network errors are raised as they are, and the hosts controller retries.

Every EC2 call blocks, so each runs in a worker thread (``asyncio.to_thread``); the synchronous methods of the
protocol (``is_up``, ``adopt``, ``annotations``, ``kill``) only read and write what the provider tracks.
``terminate`` ends an instance at once: the agent was given its grace beforehand (its Node turned
``Terminating``), and the instance's shutdown gives its systemd unit SIGTERM once more. Instances outlive
the controller process (``close`` leaves them to the next leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import boto3
import botocore.exceptions

from nodus.apimachinery import units
from nodus.apis.v1 import objects
from nodus.cloud import awshosts
from nodus.cloud.provider import BootRefused

Object = dict[str, Any]
log = logging.getLogger("nodus.cloud.aws")

INSTANCE_ANNOTATION = "aws.nodus.dev/instance-id"
REGION_ANNOTATION = "aws.nodus.dev/region"

# EC2 error codes that mean "not here, not now": the attempt is placed again on other capacity.
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "Unsupported",  # the instance type is not offered in the chosen zone
    }
)
# Error codes worth asking again for (the hosts controller's rate-limited retry).
TRANSIENT_ERRORS = frozenset(
    {"RequestLimitExceeded", "Throttling", "ThrottlingException", "InternalError", "ServiceUnavailable", "Unavailable"}
)
ALIVE = ("pending", "running", "stopping", "stopped")


@dataclass
class AwsConfig:
    """How the provider reaches EC2 and what its instances get."""

    cluster: str
    bootstrap: awshosts.Bootstrap
    # The AMI per region: the provider boots only in these regions (an offering elsewhere has capacity 0).
    images: dict[str, str]
    # moto's server in tests; None: AWS itself.
    endpoint_url: str | None = None
    subnets: dict[str, str] = field(default_factory=dict)
    security_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    key_name: str | None = None
    instance_profile: str | None = None
    # Hosts per offering at once; None: unknown (EC2 says no only when it runs out).
    capacity: int | None = None
    capacity_overrides: dict[str, int] = field(default_factory=dict)
    # An instance younger than this whose Node is unknown is spared by a sweep: its Node may be on its way.
    sweep_grace: timedelta = timedelta(minutes=2)


@dataclass
class _Instance:
    id: str
    region: str
    launched: datetime | None = None


class AwsProvider:
    """A provider whose hosts are EC2 instances (see the module docstring)."""

    name = "aws"

    def __init__(self, config: AwsConfig) -> None:
        self.config = config
        self._hosts: dict[str, _Instance] = {}
        self._clients: dict[str, Any] = {}
        self._kills: set[asyncio.Task[None]] = set()

    def _ec2(self, region: str) -> Any:
        """The EC2 client of ``region`` (thread-safe; made once: making one takes tens of milliseconds)."""
        client = self._clients.get(region)
        if client is None:
            client = boto3.client("ec2", region_name=region, endpoint_url=self.config.endpoint_url)
            self._clients[region] = client
        return client

    def capacity(self, offering: Object) -> int | None:
        view = objects.read(objects.Offering, offering)
        if view.spec.provider != self.name or view.spec.region not in self.config.images:
            return 0
        return self.config.capacity_overrides.get(view.metadata.name, self.config.capacity)

    def is_up(self, node_name: str) -> bool:
        return node_name in self._hosts

    def adopt(self, node: Object) -> bool:
        """Track the instance the Node's annotations name (what the sweep found by tags is tracked already)."""
        view = objects.read(objects.Node, node)
        name, annotations = view.metadata.name, view.metadata.annotations
        instance, region = annotations.get(INSTANCE_ANNOTATION), annotations.get(REGION_ANNOTATION)
        if name in self._hosts or not instance or not region:
            return False
        self._hosts[name] = _Instance(instance, region)
        return True

    def annotations(self, node_name: str) -> dict[str, str]:
        host = self._hosts.get(node_name)
        return {} if host is None else {INSTANCE_ANNOTATION: host.id, REGION_ANNOTATION: host.region}

    async def boot(self, node: Object, offering: Object, join_token: str) -> None:
        view = objects.read(objects.Node, node)
        name, uid = view.metadata.name, view.metadata.uid
        if name in self._hosts:
            return
        spec = objects.read(objects.Offering, offering).spec
        offering_name = offering["metadata"]["name"]
        region, instance_type = spec.region, spec.instance_type
        image = self.config.images.get(region)
        if not instance_type:
            raise BootRefused("BootFailed", f"Offering {offering_name} names no instanceType: use the AWS price book.")
        if image is None:
            raise BootRefused("BootFailed", f"No AMI for region {region}: start the controllers with --aws-image.")
        found = await asyncio.to_thread(self._find, region, {awshosts.NODE_TAG: name, awshosts.NODE_UID_TAG: uid})
        if found:
            self._hosts[name] = found[0]
            return
        request: Object = {
            "ImageId": image,
            "InstanceType": instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": awshosts.client_token(uid),
            "UserData": self.config.bootstrap.user_data(name, offering_name, join_token),
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": key, "Value": value}
                        for key, value in awshosts.tags(self.config.cluster, name, uid, offering_name).items()
                    ],
                }
            ],
        }
        if spec.interruptible:
            request["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        if subnet := self.config.subnets.get(region):
            request["SubnetId"] = subnet
        if groups := self.config.security_groups.get(region):
            request["SecurityGroupIds"] = list(groups)
        if self.config.key_name:
            request["KeyName"] = self.config.key_name
        if self.config.instance_profile:
            request["IamInstanceProfile"] = {"Name": self.config.instance_profile}
        try:
            answer = await asyncio.to_thread(self._ec2(region).run_instances, **request)
        except botocore.exceptions.ClientError as exc:
            raise refusal(exc, instance_type, region) from exc
        instance = answer["Instances"][0]
        self._hosts[name] = _Instance(instance["InstanceId"], region, instance.get("LaunchTime"))
        market = "spot" if spec.interruptible else "on-demand"
        log.info("node %s: %s %s instance %s in %s", name, market, instance_type, instance["InstanceId"], region)

    def kill(self, node_name: str) -> bool:
        """EC2 has no power-off without the instance's shutdown: the same as :meth:`terminate`, started now."""
        host = self._hosts.get(node_name)
        if host is None:
            return False
        with contextlib.suppress(RuntimeError):  # no running loop: the caller's terminate does it
            task = asyncio.get_running_loop().create_task(self.terminate(node_name, 0), name=f"kill {node_name}")
            self._kills.add(task)  # held until done: the loop keeps only weak references to tasks
            task.add_done_callback(self._kills.discard)
        return True

    async def terminate(self, node_name: str, grace_seconds: float) -> None:
        """Terminate the instance of ``node_name`` (found by its tags when untracked). ``grace_seconds`` is what the
        instance's shutdown gives the agent's unit; the Node's deadline gave it its grace before."""
        host = self._hosts.pop(node_name, None)
        if host is not None:
            await self._terminate(host.region, [host.id])
            return
        for region in self.config.images:
            found = await asyncio.to_thread(self._find, region, {awshosts.NODE_TAG: node_name})
            if found:
                await self._terminate(region, [i.id for i in found])

    async def _terminate(self, region: str, ids: list[str]) -> None:
        try:
            await asyncio.to_thread(self._ec2(region).terminate_instances, InstanceIds=ids)
        except botocore.exceptions.ClientError as exc:
            if _code(exc) != "InvalidInstanceID.NotFound":
                raise
        log.info("terminated %s in %s", ", ".join(ids), region)

    async def sweep(self, known: Mapping[str, str]) -> list[str]:
        """Adopt the instances of known Nodes, terminate those of unknown ones (see ``Sweeping.sweep``)."""
        now = units.now()
        swept: list[str] = []
        for region in self.config.images:
            orphans: list[str] = []
            for tags, instance in await asyncio.to_thread(self._tagged, region, {}):
                name = tags.get(awshosts.NODE_TAG, "")
                if name in known and known[name] == tags.get(awshosts.NODE_UID_TAG):
                    self._hosts.setdefault(name, instance)
                    continue
                if instance.launched is not None and now - instance.launched < self.config.sweep_grace:
                    continue
                log.warning("instance %s (node %s) has no Node: terminating it", instance.id, name or "?")
                orphans.append(instance.id)
                swept.append(name)
                tracked = self._hosts.get(name)
                if tracked is not None and tracked.id == instance.id:
                    del self._hosts[name]
            if orphans:
                await self._terminate(region, orphans)
        return swept

    def _find(self, region: str, wanted: dict[str, str]) -> list[_Instance]:
        """The live instances of this cluster in ``region`` with the tags ``wanted`` (blocking)."""
        return [instance for _, instance in self._tagged(region, wanted)]

    def _tagged(self, region: str, wanted: dict[str, str]) -> list[tuple[dict[str, str], _Instance]]:
        """Every live instance of this cluster in ``region`` with the tags ``wanted``, with all its tags (blocking)."""
        filters = [{"Name": f"tag:{awshosts.CLUSTER_TAG}", "Values": [self.config.cluster]}]
        filters += [{"Name": f"tag:{key}", "Values": [value]} for key, value in wanted.items()]
        filters.append({"Name": "instance-state-name", "Values": list(ALIVE)})
        out = []
        for page in self._ec2(region).get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    tags = {tag["Key"]: tag["Value"] for tag in instance.get("Tags") or ()}
                    out.append((tags, _Instance(instance["InstanceId"], region, instance.get("LaunchTime"))))
        return out

    def forget(self) -> None:
        """Stop tracking every instance (leadership lost: the next leader adopts them)."""
        self._hosts.clear()

    async def close(self) -> None:
        """Instances outlive the controllers: only the clients' connections are closed."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def refusal(exc: botocore.exceptions.ClientError, instance_type: str, region: str) -> BaseException:
    """What an EC2 error from ``RunInstances`` means for the Node: :class:`BootRefused` (``CapacityBusy`` or
    ``BootFailed``), or the error itself when asking again may work."""
    code = _code(exc)
    error: BaseException = exc
    message = str(exc.response.get("Error", {}).get("Message") or code)
    if code in CAPACITY_ERRORS:
        return BootRefused("CapacityBusy", f"EC2 has no {instance_type} for Nodus in {region} now ({code}: {message}).")
    if code in TRANSIENT_ERRORS or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400) >= 500:
        return error
    return BootRefused("BootFailed", f"EC2 refused to start a {instance_type} in {region} ({code}: {message}).")


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "")
