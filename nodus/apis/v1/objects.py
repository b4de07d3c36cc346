"""Typed, read-only views of stored objects: what controllers, the scheduler and the agent read.

A client gets objects as JSON (``dict``) from lists, watches and informers. :func:`read` turns one
into a frozen model of its kind (``read(Job, obj).spec.recovery.max_attempts``), built from the very
models the API server validates with, so a misspelt field is a type error and the defaults the
server declares (and stores) are the values a reader sees when a field is absent. Writes stay JSON:
a controller builds a status or a patch as a dict and sends it through the API.

Reading ignores fields this version does not know (``READING``), as a Kubernetes client does, and
never fails on what the server stored: an object that no longer validates (written by an older
server under older rules) is read leniently, field by field, rather than wedging its reconciler.

Views of one stored version are immutable, so :func:`read` keeps the most recent ones by
``(kind, uid, resourceVersion)``: an informer's object is parsed once however many reconciles and
scheduling cycles read it. Objects without both (built in memory) are parsed every time.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from nodus.apis.v1.attempt import AttemptSpec, AttemptStatus
from nodus.apis.v1.base import READING
from nodus.apis.v1.bootstraptoken import BootstrapTokenSpec, BootstrapTokenStatus
from nodus.apis.v1.budget import BudgetSpec, BudgetStatus
from nodus.apis.v1.connection import ConnectionSpec
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.jobstatus import JobStatus
from nodus.apis.v1.lease import LeaseSpec
from nodus.apis.v1.node import NodeSpec, NodeStatus
from nodus.apis.v1.offering import OfferingSpec, OfferingStatus
from nodus.apis.v1.pipeline import PipelineSpec, PipelineStatus
from nodus.apis.v1.pool import PoolSpec, PoolStatus
from nodus.apis.v1.project import ProjectSpec, ProjectStatus
from nodus.apis.v1.secret import SecretStatus
from nodus.apis.v1.volume import VolumeSpec, VolumeStatus
from nodus.apis.v1.workspace import WorkspaceSpec, WorkspaceStatus

CACHE_SIZE: Final = 50_000


class View(BaseModel):
    """Base of the object views and of metadata: camelCase keys, unknown fields ignored, frozen."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=False, extra="ignore", frozen=True, defer_build=True
    )


class OwnerReference(View):
    """An owner of the object (``metav1.OwnerReference``)."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False
    block_owner_deletion: bool = False


class ObjectMeta(View):
    """The metadata every object has (``metav1.ObjectMeta``); absent maps and lists read as empty."""

    name: str = ""
    namespace: str | None = None
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()

    def controller_uid(self) -> str | None:
        """The uid of the owner that controls this object, if any."""
        return next((ref.uid for ref in self.owner_references if ref.controller), None)


class Job(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)


class Attempt(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AttemptSpec
    status: AttemptStatus = Field(default_factory=AttemptStatus)


class Node(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeSpec
    status: NodeStatus = Field(default_factory=NodeStatus)


class Offering(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: OfferingSpec
    status: OfferingStatus = Field(default_factory=OfferingStatus)


class Pool(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PoolSpec = Field(default_factory=PoolSpec)
    status: PoolStatus = Field(default_factory=PoolStatus)


class Project(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ProjectSpec = Field(default_factory=ProjectSpec)
    status: ProjectStatus = Field(default_factory=ProjectStatus)


class Budget(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: BudgetSpec
    status: BudgetStatus = Field(default_factory=BudgetStatus)


class BootstrapToken(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: BootstrapTokenSpec = Field(default_factory=BootstrapTokenSpec)
    status: BootstrapTokenStatus = Field(default_factory=BootstrapTokenStatus)


class Connection(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ConnectionSpec


class Lease(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: LeaseSpec = Field(default_factory=LeaseSpec)


class Secret(View):
    """A Secret as served: its type, the names of its values (never the values) and its versions."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    type: str = "Opaque"
    status: SecretStatus = Field(default_factory=SecretStatus)


class Pipeline(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PipelineSpec
    status: PipelineStatus = Field(default_factory=PipelineStatus)


class Volume(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: VolumeSpec = Field(default_factory=VolumeSpec)
    status: VolumeStatus = Field(default_factory=VolumeStatus)


class Workspace(View):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: WorkspaceSpec = Field(default_factory=WorkspaceSpec)
    status: WorkspaceStatus = Field(default_factory=WorkspaceStatus)


V = TypeVar("V", bound=View)

_cache: dict[tuple[type[View], object, object], View] = {}


def read(kind: type[V], obj: dict[str, Any]) -> V:
    """The typed view of ``obj`` (a stored object as JSON). Never mutates ``obj``; never raises for an
    object the server stored (see the module docstring); raises ``ValidationError`` only for JSON that
    is not an object of the kind at all (a required field such as a Job's ``spec`` missing)."""
    meta = obj.get("metadata")
    key = None
    if meta.__class__ is dict:  # exactly a dict (cheaper than isinstance on this hot path)
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if uid and version:
            key = (kind, uid, version)
            cached = _cache.get(key)
            if cached is not None:
                return cached  # type: ignore[return-value]  # the key's kind is the view's class
    view = _validate(kind, obj)
    if key is not None:
        # Oldest first out: a reader of an object keeps a new version coming, so what falls out is history.
        if len(_cache) >= CACHE_SIZE:
            # A reader in another thread (the agent's) may evict the same entry at once: either is fine.
            with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                del _cache[next(iter(_cache))]
        _cache[key] = view
    return view


def _validate(kind: type[V], obj: dict[str, Any]) -> V:
    try:
        return kind.model_validate(obj, context=READING)
    except ValidationError as error:
        # Stored under older rules: drop what no longer validates (it reads as its default) and keep the rest.
        data = copy.deepcopy(obj)
        for _ in range(_MAX_REPAIRS):
            if not any(_drop(data, tuple(item["loc"])) for item in error.errors()):
                break
            try:
                return kind.model_validate(data, context=READING)
            except ValidationError as again:
                error = again
        raise error from None


_MAX_REPAIRS: Final = 16


def _drop(data: Any, loc: tuple[int | str, ...]) -> bool:
    """Remove the value at ``loc`` from ``data``, or the item holding it when it is missing; True if removed."""
    for end in range(len(loc), 0, -1):
        parent: Any = data
        for part in loc[: end - 1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        last = loc[end - 1]
        if isinstance(parent, dict) and last in parent:
            del parent[last]
            return True
        if isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent):
            del parent[last]
            return True
    return False
