"""Settings of one API server process."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from nodus.api.auth.requestheader import RequestHeaderConfig


@dataclass(frozen=True)
class ServerSettings:
    database_url: str
    token_auth_file: Path | None = None
    requestheader: RequestHeaderConfig | None = None
    # How long the watch log keeps events: the oldest resourceVersion a watch or continue token
    # may name. Older ones get 410 Expired.
    watch_retention: timedelta = timedelta(minutes=15)
    watch_cache_capacity: int = 20_000
    bookmark_interval: float = 10.0
    # kube-apiserver's --min-request-timeout: a watch without timeoutSeconds lasts between this and twice this
    # (spread so that reconnects do not come at once), and no watch lasts longer than twice this (ADR 0033).
    min_request_timeout: float = 1800.0
    # Concurrent watches and followed logs one user may hold open on this process (0: no cap). Administrators
    # (system:masters) are exempt, as kube-apiserver's priority and fairness exempts them (ADR 0033).
    max_watches_per_user: int = 100
    max_log_follows_per_user: int = 20
    pool_size: int = 20
    # Base of the docs links in errors; the request's own base URL when empty.
    external_url: str = ""
    # The image `nodus run` puts in a Job that names none (GET /serverinfo announces it; "": none).
    default_image: str = ""
    compaction_interval: float = 60.0
    # How often the garbage collector re-checks everything even when no deletion was seen.
    gc_resync: float = 5.0
    # Projects created at start when missing (nodus dev: "default").
    bootstrap_projects: tuple[str, ...] = field(default=())
    # Credit granted once to each bootstrap project (nodus dev: 100 USD), so a new user can run Jobs at once.
    bootstrap_credits: Decimal | None = None
    # The price book the stored Offerings are made equal to at start; None: the one shipped with Nodus.
    price_book: Path | None = None
    # Where blob bytes go (--blob-store): file:///dir, a directory, or s3://bucket/prefix?endpoint=&region=.
    # None: blob, output and Volume revision endpoints answer 503.
    blob_store: str | None = None
    # The funded window of a hold, as the billing controller places it (--funded-window of both): the
    # estimate quotes holds with it.
    funded_window: timedelta = timedelta(minutes=10)
    # What Jobs and Connections may name for the agent to reach (ADR 0032): loopback only with
    # --allow-loopback-endpoints (tests, nodus dev); these HOST[:PORT] endpoints (--forbid-address and
    # the listening address) never; the database's own endpoint is added from database_url.
    allow_loopback_endpoints: bool = False
    forbid_addresses: tuple[str, ...] = ()
    # How long a node credential lives (--node-credential-ttl); agents renew theirs halfway (ADR 0035).
    node_credential_ttl: timedelta = timedelta(hours=24)
    # Blobs (ADR 0034): the largest blob (--max-blob-size) and the bytes a project may store
    # (--project-storage-quota); None: no limit.
    max_blob_size: int | None = 64 * 2**30
    project_storage_quota: int | None = 2**40
    # A blob nothing has named for this long is deleted (--blob-grace-period), by a pass every
    # --blob-collection-interval that also charges a project's storage hour by hour.
    blob_grace_period: timedelta = timedelta(hours=24)
    blob_collection_interval: timedelta = timedelta(minutes=1)
    # How long a billed hour of a project's storage lasts (--storage-charge-interval; tests shorten it).
    storage_charge_interval: timedelta = timedelta(hours=1)
