"""The Job's admission estimate: what the API server reads for it, and the ETag that binds a create.

On every create of a Job (dry run or not) :meth:`JobEstimates.admit` reads the offerings, the idle
hosts, the project's earlier runs of the same program, its available credit and its Budgets, and
stores the estimate (:func:`nodus.billing.estimating.estimate`) in ``status.estimate``. A real create
whose first hold cannot fit is refused with the first blocking reason as a 402-style Status naming the
amounts and the fix; a dry run reports the reasons in the estimate instead (ADR 0046 §21).

The dry run's response carries an ETag: the estimate and the Job's spec, sealed with the server's
secret keys (AES-GCM, so the server can trust what comes back and every API server holding the key
file can read it). A create with that value in ``If-Match`` is *bound*: it stores that estimate, is
admitted whatever ``validUntil`` says, and carries the annotation
:data:`nodus.apimachinery.estimates.RATE_CEILING` so the scheduler never places it above the
estimate's rate plus 10 %. A bound create of another spec, or a forged or unreadable value, is a 412.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
import zlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson

from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.apimachinery import estimates, topology, units, workloads
from nodus.apimachinery.money import text
from nodus.apimachinery.sealing import Keyring, OpenError, Sealed
from nodus.billing import budgets, estimating, ledger
from nodus.scheduler.capacity import Host, Offering, PlatformFee
from nodus.scheduler.cycle import Binding
from nodus.storage import admission
from nodus.storage.listing import ListQuery
from nodus.storage.objects import Storage

Object = dict[str, Any]
_ASSOCIATED = b"nodus.dev/estimate-binding/v1"
_HISTORY_ROWS = estimating.HISTORY_SAMPLES
#: How stale the placement preview's view of offerings and hosts may be.
CAPACITY_TTL = 2.0
_PLACEMENTS_KEPT = 256
# Blocking reasons a real create answers with, in this order (the first that applies).
_REFUSALS = ("MaxCostBelowHold", "InsufficientCredits", "BudgetExceeded")


class JobEstimates:
    """The estimate step of Job creation, for one API server."""

    def __init__(
        self,
        storage: Storage,
        pricebook_version: str,
        funded_window: timedelta,
        keyring: Keyring | None,
        fee: PlatformFee | None = None,
    ) -> None:
        self._storage = storage
        self._pricebook_version = pricebook_version
        self._fee = fee if fee is not None else PlatformFee()
        self._funded_window = funded_window
        # The ETags' own subkeys of the key file (ADR 0035): an ETag can never open as anything else.
        self._keyring = keyring.derive("estimate-etags") if keyring is not None else None
        self._capacity_cache: tuple[float, list[Offering], list[Host]] | None = None
        self._placements: dict[bytes, tuple[Binding | None, str]] = {}
        self._capacity_refresh: asyncio.Future[tuple[list[Offering], list[Host]]] | None = None

    async def admit(self, job: Object, ctx: RequestContext) -> None:
        """Put the estimate into ``job["status"]``; refuse a real create that cannot fund its first hold.

        With ``ctx.if_match`` the create is bound to that dry run's estimate (a 412 if it does not
        belong to this spec); a dry run answers its ETag in ``ctx.response_headers``."""
        namespace = str(job["metadata"]["namespace"])
        now = units.now()
        bound = self.unseal(ctx.if_match, namespace, job) if ctx.if_match else None
        inputs = await self._inputs(job, now)
        if bound is None:
            estimate = estimating.estimate(inputs, self._place)
        else:
            # The bound estimate is the one stored; money is checked against the funds of now.
            first_hold = Decimal(str(bound.get("holdUSD") or "0"))
            bound["blockingReasons"] = estimating.blocking(inputs, first_hold) or None
            estimate = {k: v for k, v in bound.items() if v is not None}
            rate = bound.get("rateUSDPerHour")
            if rate is not None:
                annotations = job["metadata"].setdefault("annotations", {})
                annotations[estimates.RATE_CEILING] = text(estimates.ceiling(Decimal(str(rate))))
        job.setdefault("status", {})["estimate"] = estimate
        resolved = topology.resolve(job.get("spec") or {}, _accelerator(estimate, inputs.offerings))
        if resolved is not None:
            job["status"]["topology"] = resolved  # ADR 0046 §12: resolved once, at admission
        if ctx.dry_run:
            if self._keyring is not None:
                ctx.response_headers["ETag"] = f'"{self.seal(namespace, job, estimate)}"'
            return
        for code in _REFUSALS:
            for reason in estimate.get("blockingReasons") or []:
                if reason["code"] == code:
                    raise APIError(
                        code,
                        f'jobs.nodus.dev "{job["metadata"].get("name", "")}" cannot be created: {reason["message"]}',
                        fix=reason["fix"],
                        details={"name": job["metadata"].get("name", ""), "group": "nodus.dev", "kind": "jobs"},
                    )

    async def preview(self, job: Object) -> tuple[Object, Decimal]:
        """The estimate of ``job`` (a Job as it would be created) and the project's available credit, without
        binding or refusing anything: a Pipeline's estimate is made of its stages' (``pipelineestimates``)."""
        inputs = await self._inputs(job, units.now())
        return estimating.estimate(inputs, self._place), inputs.available

    def _place(self, inputs: estimating.Inputs, duration: Decimal) -> tuple[Binding | None, str]:
        """The scheduler's placement for the Job's shape, memoised for as long as the capacity view lives
        (a burst of creates of one shape runs the cycle once)."""
        spec = inputs.job.get("spec") or {}
        key = [spec.get("resources"), spec.get("placement"), spec.get("distributed"), str(duration)]
        shape = orjson.dumps(key, option=orjson.OPT_SORT_KEYS)
        placed = self._placements.get(shape)
        if placed is None:
            if len(self._placements) >= _PLACEMENTS_KEPT:
                self._placements.clear()
            placed = self._placements[shape] = estimating.placement(inputs, duration)
        return placed

    async def _inputs(self, job: Object, now: datetime) -> estimating.Inputs:
        namespace = str(job["metadata"]["namespace"])
        offerings, hosts = await self._capacity()
        # The credit, the Budgets and the history in one round trip (docs/benchmarks.md §1.1).
        labels = {workloads.LABEL: workloads.signature(job.get("spec") or {})}
        read = await admission.admission_reads(self._storage, namespace, labels, _HISTORY_ROWS)
        job_labels = job["metadata"].get("labels") or {}
        rooms = await budgets.rooms_among(self._storage, read.budgets, job_labels, now)
        return estimating.Inputs(
            job=job,
            offerings=offerings,
            hosts=hosts,
            history=_runs(read.history),
            available=read.balances.get(ledger.AVAILABLE, Decimal(0)),
            budgets=[estimating.Room(room.name, room.limit, room.remaining) for room in rooms],
            pricebook_version=self._pricebook_version,
            funded_window=self._funded_window,
            now=now,
            fee=self._fee,
        )

    async def _capacity(self) -> tuple[list[Offering], list[Host]]:
        """The offerings and hosts, parsed; read at most once per :data:`CAPACITY_TTL` (creates come in
        bursts, and 140 offerings are the largest read of a create). One read at a time: the creates
        that find the view stale meanwhile use it as it is, so a burst never reads it once per create.
        Money is never cached."""
        cached = self._capacity_cache
        if cached is not None and time.monotonic() - cached[0] <= CAPACITY_TTL:
            return cached[1], cached[2]
        if self._capacity_refresh is None or self._capacity_refresh.done():
            self._capacity_refresh = asyncio.ensure_future(self._read_capacity())
            # A failed read is retried by the next create; its error is not left unretrieved.
            self._capacity_refresh.add_done_callback(lambda done: done.cancelled() or done.exception())
        if cached is not None:
            return cached[1], cached[2]
        offerings, hosts = await asyncio.shield(self._capacity_refresh)
        return offerings, hosts

    async def _read_capacity(self) -> tuple[list[Offering], list[Host]]:
        offerings = [Offering.from_object(o) for o in await self._list(ListQuery(kind="Offering"))]
        # A pool host is never released, so it never shows idleSince: it is taken to be free (the preview does not
        # read what runs on it; the scheduler does).
        hosts = [
            Host.from_object(node, busy=not (node.get("status") or {}).get("idleSince") and not _pooled(node))
            for node in await self._list(ListQuery(kind="Node"))
        ]
        self._capacity_cache = (time.monotonic(), offerings, hosts)
        self._placements.clear()
        return offerings, hosts

    async def _list(self, query: ListQuery) -> list[Object]:
        async with self._storage.open_list(query) as cursor:
            return [orjson.loads(body) async for batch in cursor.batches() for _, _, body in batch]

    # --- the ETag --------------------------------------------------------------------------------

    @property
    def can_seal(self) -> bool:
        """Whether this server has the key file that seals estimate ETags."""
        return self._keyring is not None

    def seal(self, namespace: str, job: Object, estimate: Object) -> str:
        """The ETag of ``estimate`` for ``job``'s spec in ``namespace`` (a Job's or a Pipeline's)."""
        assert self._keyring is not None
        payload = orjson.dumps({"namespace": namespace, "spec": job.get("spec") or {}, "estimate": estimate})
        sealed = self._keyring.seal(zlib.compress(payload, 9), _ASSOCIATED)
        parts = (sealed.key_id, sealed.nonce_b64, sealed.ciphertext_b64)
        return ".".join(base64.urlsafe_b64encode(p.encode()).decode().rstrip("=") for p in parts)

    def unseal(self, value: str, namespace: str, job: Object) -> Object:
        """The estimate an ETag sealed for exactly ``job``'s spec in ``namespace``; a 412 Status otherwise."""
        if self._keyring is None:
            raise APIError(
                "ServiceUnavailable",
                "this API server cannot read estimate ETags: it was started without --secret-key-file",
                fix="Start the API servers with the same --secret-key-file, or create without If-Match.",
            )
        token = value.strip()
        token = token[2:] if token.startswith("W/") else token
        try:
            key_id, nonce, ciphertext = (_unpad(part) for part in token.strip('"').split("."))
            payload = orjson.loads(zlib.decompress(self._keyring.open(Sealed(key_id, nonce, ciphertext), _ASSOCIATED)))
        except (ValueError, OpenError, zlib.error, binascii.Error, orjson.JSONDecodeError):
            raise _mismatch("If-Match is not the ETag of an estimate from this cluster") from None
        if payload.get("namespace") != namespace or payload.get("spec") != (job.get("spec") or {}):
            raise _mismatch("If-Match is the ETag of an estimate of another spec or project")
        estimate = payload.get("estimate")
        if not isinstance(estimate, dict):
            raise _mismatch("If-Match is not the ETag of an estimate from this cluster")
        return estimate


def _pooled(node: Object) -> bool:
    return bool((node.get("spec") or {}).get("pool"))


def _runs(attempts: list[Object]) -> list[estimating.Run]:
    """The earlier runs of the program: each Succeeded Attempt's time from capacity to start, and running."""
    runs = []
    for attempt in attempts:
        status = attempt.get("status") or {}
        capacity = units.time_or_none(status.get("provisioningTime") or status.get("scheduledTime"))
        started = units.time_or_none(status.get("startTime"))
        finished = units.time_or_none(status.get("finishTime"))
        if capacity is None or started is None or finished is None:
            continue
        runs.append(
            estimating.Run(
                boot=_seconds(started - capacity),
                running=_seconds(finished - started),
                warm=bool((status.get("placement") or {}).get("warmReuse")),
                finished=finished,
            )
        )
    return runs


def _mismatch(message: str) -> APIError:
    return APIError(
        "EstimateMismatch",
        message,
        fix="Send the ETag of a dry run (?dryRun=All) of exactly this spec in this project, or create without "
        "If-Match.",
    )


def _unpad(part: str) -> str:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode()


def _seconds(delta: timedelta) -> Decimal:
    return max(Decimal(str(delta.total_seconds())), Decimal(0))


def _accelerator(estimate: Object, offerings: Sequence[Offering]) -> str | None:
    """The accelerator variant of the offering the estimate placed the Job on, if it placed it."""
    chosen = (estimate.get("placementPreview") or {}).get("offering")
    return next((o.accelerator for o in offerings if o.id == chosen), None)
