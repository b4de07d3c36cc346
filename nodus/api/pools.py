"""A Pool's join tokens and the hosts that join with them (ADR 0047): the service behind two routes.

* ``nodus.api.http.jointokens`` mints, lists and revokes a pool's join tokens. A join token is a
  BootstrapToken (``nodus.api.kinds.bootstraptoken``) with ``spec.pool: {project, name}``, no node
  name binding, and the labels ``nodus.dev/pool`` and ``nodus.dev/pool-project`` that find a pool's
  tokens. Its secret is made here, returned once and stored only as its hash.
* ``nodus.api.http.nodecredentials`` hands a pool token's exchange to :meth:`PoolHosts.join`, which
  finds or creates the host's Node in the pool: ``spec.pool``, ``spec.provider: pool``, the pool labels
  and the Pool's ``spec.nodeLabels``. It refuses, each with a Status naming the fix, a pool that is gone
  or being deleted, a full pool (``spec.maxHosts`` counts the pool's Nodes that are not Lost, Failed or
  being deleted) and a node name that is already something else's.

``maxHosts`` holds across concurrent joins on one server (joins of one pool are serialised here) and,
between servers, by a check after the create: a Node that finds itself beyond the limit in creation
order is deleted again and refused. Services never authorise: the routes have done it.
"""

from __future__ import annotations

import asyncio
import secrets
import string
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.kinds import bootstraptoken
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.store import GenericStore
from nodus.apimachinery import units
from nodus.apis.v1 import labels
from nodus.storage.objects import Storage

Object = dict[str, Any]

DEFAULT_TTL = timedelta(hours=1)
MIN_TTL = timedelta(minutes=1)
PROVIDER = "pool"
_ALPHABET = string.ascii_lowercase + string.digits
# A Node in one of these phases (or being deleted) no longer takes a place in its pool.
_GONE_PHASES = ("Lost", "Failed")
_UNUSABLE_PHASES = ("Lost", "Failed", "Terminating")


@dataclass(frozen=True)
class PoolRef:
    """A Pool by project and name (a join token's ``spec.pool``, a Node's ``spec.pool``)."""

    project: str
    name: str

    @classmethod
    def of(cls, obj: Object | None) -> PoolRef | None:
        """The ``spec.pool`` of a stored BootstrapToken or Node, if it has one."""
        pool = ((obj or {}).get("spec") or {}).get("pool")
        if not isinstance(pool, dict) or not pool.get("project") or not pool.get("name"):
            return None
        return cls(str(pool["project"]), str(pool["name"]))

    def labels(self) -> dict[str, str]:
        return {labels.POOL: self.name, labels.POOL_PROJECT: self.project}

    def __str__(self) -> str:
        return f"{self.project}/{self.name}"


@dataclass(frozen=True)
class Minted:
    """A join token as created: ``token`` (``<id>.<secret>``) is shown this once and never again."""

    token: str
    id: str
    expiration: str


def occupies(node: Object) -> bool:
    """Whether a pool's Node takes one of its ``maxHosts`` places: not Lost, Failed or being deleted."""
    phase = (node.get("status") or {}).get("phase")
    return not node["metadata"].get("deletionTimestamp") and phase not in _GONE_PHASES


def token_entry(token: Object) -> Object:
    """A join token as ``GET .../jointokens`` lists it: never its secret nor its hash."""
    spec, status = token.get("spec") or {}, token.get("status") or {}
    expiration = str(spec.get("expiration") or "")
    expires = units.time_or_none(expiration)
    entry: Object = {
        "id": token["metadata"]["name"],
        "expiration": expiration,
        "expired": expires is None or expires <= units.now(),
        "nodes": list(status.get("nodes") or []),
        "creationTimestamp": token["metadata"].get("creationTimestamp"),
    }
    if status.get("lastUsedTime"):
        entry["lastUsedTime"] = status["lastUsedTime"]
    if spec.get("description"):
        entry["description"] = spec["description"]
    return entry


class PoolHosts:
    """Join tokens of Pools, and Nodes joining them (see the module docstring)."""

    def __init__(self, pools: GenericStore, nodes: GenericStore, tokens: GenericStore, storage: Storage) -> None:
        self._pools = pools
        self._nodes = nodes
        self._tokens = tokens
        self._storage = storage
        self._joining: defaultdict[PoolRef, asyncio.Lock] = defaultdict(asyncio.Lock)

    # --- join tokens -----------------------------------------------------------------------------

    async def usable_pool(self, pool: PoolRef) -> Object:
        """The Pool, unless it is gone (404) or being deleted (409): what minting and joining need."""
        obj = await self._pools.find(pool.project, pool.name)
        if obj is None:
            raise APIError(
                "NotFound",
                f'pools.{GROUP} "{pool.name}" not found in project "{pool.project}"',
                fix=f"Create the pool first (kubectl create -n {pool.project} -f pool.yaml), or name an existing "
                f"one: kubectl get pools -n {pool.project}.",
                details={"name": pool.name, "group": GROUP, "kind": "pools"},
            )
        if obj["metadata"].get("deletionTimestamp"):
            raise APIError(
                "Conflict",
                f'pools.{GROUP} "{pool.name}" in project "{pool.project}" is being deleted: no host can join it',
                fix="Create another pool (or wait until this one is gone and create it again), then mint a join "
                "token of it: nodus pools join-token POOL.",
                details={"name": pool.name, "group": GROUP, "kind": "pools"},
            )
        return obj

    async def mint(self, pool: PoolRef, ttl: timedelta, description: str, ctx: RequestContext) -> Minted:
        """Create a join token of ``pool`` that works for ``ttl``."""
        await self.usable_pool(pool)
        secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
        expiration = units.format_time(units.now() + ttl)
        spec: Object = {"pool": {"project": pool.project, "name": pool.name}, "secret": secret}
        spec["expiration"] = expiration
        if description:
            spec["description"] = description
        for _ in range(8):  # six characters of 36: a clash is rare, and answered by another id
            token_id = "".join(secrets.choice(_ALPHABET) for _ in range(6))
            body = {
                "apiVersion": API_VERSION,
                "kind": "BootstrapToken",
                "metadata": {"name": token_id, "labels": pool.labels()},
                "spec": dict(spec),
            }
            try:
                await self._tokens.create(None, body, ctx)
            except APIError as error:
                if error.reason != "AlreadyExists":
                    raise
                continue
            return Minted(f"{token_id}.{secret}", token_id, expiration)
        raise APIError("Conflict", "no free join token id was found; retry")

    async def tokens(self, pool: PoolRef) -> list[Object]:
        """The pool's join tokens, oldest first (expired ones too, until they are revoked)."""
        found = await self._storage.labelled("BootstrapToken", pool.labels())
        mine = [t for t in found if PoolRef.of(t) == pool and not t["metadata"].get("deletionTimestamp")]
        return sorted(mine, key=lambda t: (str(t["metadata"].get("creationTimestamp")), t["metadata"]["name"]))

    async def revoke(self, pool: PoolRef, token_id: str, ctx: RequestContext) -> Object:
        """Delete the pool's join token ``token_id``; 404 when there is none of this pool by that id. Hosts
        that joined with it keep their credentials (delete their Nodes to revoke them)."""
        token = await self._tokens.find(None, token_id)
        if token is None or PoolRef.of(token) != pool:
            raise APIError(
                "NotFound",
                f'pool "{pool.name}" of project "{pool.project}" has no join token "{token_id}"',
                fix=f"List the pool's tokens: nodus pools tokens {pool.name} --project {pool.project}.",
                details={"name": token_id, "group": GROUP, "kind": "jointokens"},
            )
        await self._tokens.delete(None, token_id, {"preconditions": {"uid": token["metadata"]["uid"]}}, ctx)
        return token

    # --- joining ---------------------------------------------------------------------------------

    async def join(self, pool: PoolRef, name: str, ctx: RequestContext) -> Object:
        """The Node ``name`` of a host joining ``pool`` with one of its tokens: the one it registered
        before (a host rejoining), or a new one when the pool has room."""
        existing = await self._nodes.find(None, name)
        if existing is not None:
            return self._rejoining(pool, existing)
        async with self._joining[pool]:
            obj = await self.usable_pool(pool)
            limit = (obj.get("spec") or {}).get("maxHosts")
            hosts = await self.hosts(pool)
            if isinstance(limit, int) and sum(1 for n in hosts if occupies(n)) >= limit:
                raise _full(pool, limit)
            node_labels = {**((obj.get("spec") or {}).get("nodeLabels") or {}), **pool.labels()}
            body = {
                "apiVersion": API_VERSION,
                "kind": "Node",
                "metadata": {"name": name, "labels": node_labels},
                "spec": {"pool": {"project": pool.project, "name": pool.name}, "provider": PROVIDER},
            }
            try:
                node = await self._nodes.create(None, body, ctx)
            except APIError as error:
                if error.reason != "AlreadyExists":
                    raise
                return self._rejoining(pool, await self._nodes.get(None, name))
        if isinstance(limit, int):
            await self._within_limit(pool, node, limit, ctx)
        return node

    async def hosts(self, pool: PoolRef) -> list[Object]:
        """The pool's Nodes, in every phase."""
        found = await self._storage.labelled("Node", pool.labels())
        return [n for n in found if PoolRef.of(n) == pool]

    def _rejoining(self, pool: PoolRef, node: Object) -> Object:
        name = node["metadata"]["name"]
        if PoolRef.of(node) != pool:
            owner = PoolRef.of(node)
            offering = (node.get("spec") or {}).get("offering")
            what = f"a host of pool {owner}" if owner else f"a host of offering {offering}"
            raise APIError(
                "Conflict",
                f'node "{name}" exists and is {what}, not of pool {pool}',
                fix="Start the agent with another --node-name (it defaults to the host name), or delete that Node "
                f"first (kubectl delete node.nodus.dev {name}).",
                details={"name": name, "group": GROUP, "kind": "nodes"},
            )
        phase = (node.get("status") or {}).get("phase")
        deleting = bool(node["metadata"].get("deletionTimestamp"))
        if deleting or phase in _UNUSABLE_PHASES:
            raise APIError(
                "Conflict",
                f'node "{name}" is {"being deleted" if deleting else phase}: it cannot join pool {pool} again',
                fix="Start the agent under a new --node-name.",
                details={"name": name, "group": GROUP, "kind": "nodes"},
            )
        return node

    async def _within_limit(self, pool: PoolRef, node: Object, limit: int, ctx: RequestContext) -> None:
        """After a create: another server may have let a host in at the same time. The Nodes beyond ``limit``
        in creation order leave again, so the pool never keeps more than ``limit``."""
        ordered = sorted(
            (n for n in await self.hosts(pool) if occupies(n)),
            key=lambda n: (str(n["metadata"].get("creationTimestamp")), n["metadata"]["name"]),
        )
        if node["metadata"]["uid"] in {n["metadata"]["uid"] for n in ordered[:limit]}:
            return
        meta = node["metadata"]
        await self._nodes.delete(None, meta["name"], {"preconditions": {"uid": meta["uid"]}}, ctx)
        raise _full(pool, limit)


def _full(pool: PoolRef, limit: int) -> APIError:
    return APIError(
        "Forbidden",
        f"pool {pool} is full: it has {limit} hosts (spec.maxHosts: {limit})",
        fix=f"An Owner raises spec.maxHosts (kubectl patch pool {pool.name} -n {pool.project} --type merge -p "
        f'\'{{"spec":{{"maxHosts":{limit + 1}}}}}\'), or removes a host (kubectl delete node.nodus.dev NAME).',
        details={
            "name": pool.name,
            "group": GROUP,
            "kind": "pools",
            "causes": [{"reason": "PoolFull", "message": f"spec.maxHosts is {limit}", "field": "spec.maxHosts"}],
        },
    )


def ttl_of(seconds: Any) -> timedelta:
    """A join token's lifetime from ``spec.expirationSeconds`` (None: the default); ValueError naming the range."""
    if seconds is None:
        return DEFAULT_TTL
    low, high = int(MIN_TTL.total_seconds()), int(bootstraptoken.MAX_TTL.total_seconds())
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not low <= seconds <= high:
        raise ValueError(f"must be an integer from {low} to {high} (30 days)")
    return timedelta(seconds=seconds)
