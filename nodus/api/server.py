"""One API server process: storage, the kinds it serves, authentication and authorisation."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from nodus.api import bootstrap, offerings
from nodus.api.attemptlogs import Logs
from nodus.api.auth.authorization import Authorizer, member_names
from nodus.api.auth.bootstraptokens import BootstrapTokenAuthenticator
from nodus.api.auth.nodecredentials import NodeCredentials
from nodus.api.auth.principal import Principal
from nodus.api.auth.tokens import TokenAuthenticator
from nodus.api.blobcollection import BlobCollector, CollectionSettings
from nodus.api.blobservice import Blobs
from nodus.api.consoleassets import ConsoleAssets
from nodus.api.consolesessions import ConsoleSessions
from nodus.api.credits import Credits
from nodus.api.estimates import JobEstimates
from nodus.api.garbagecollection import GarbageCollector
from nodus.api.kinds import catalog, destinationrules
from nodus.api.ledgerdoor import LedgerDoor
from nodus.api.listwatch import ListWatch
from nodus.api.metrics import Metrics
from nodus.api.nodegraph import StoredNodeGraph
from nodus.api.pipelineestimates import PipelineEstimates
from nodus.api.pools import PoolHosts
from nodus.api.projectdeletion import ProjectDeletion
from nodus.api.projectview import ProjectView
from nodus.api.registry import Registry
from nodus.api.settings import ServerSettings
from nodus.api.store import GenericStore
from nodus.apimachinery.sealing import Keyring
from nodus.billing.storage import Price as StoragePrice
from nodus.catalog.pricebook import HOURS_PER_MONTH
from nodus.scheduler.capacity import PlatformFee
from nodus.storage import blobcollection
from nodus.storage.errors import Key
from nodus.storage.objects import Storage
from nodus.storage.objectstore import ObjectStore, open_store

log = logging.getLogger(__name__)


class APIServer:
    def __init__(
        self, settings: ServerSettings, registry: Registry | None = None, secret_key_file: Path | None = None
    ) -> None:
        """``secret_key_file`` (``--secret-key-file``) holds the keys that seal Secret values; without
        one, Secret writes and the values endpoint answer 503. Read here, so a bad file stops the start."""
        self.settings = settings
        self.secret_keys = Keyring.load(secret_key_file) if secret_key_file is not None else None
        # The destinations Jobs and Connections may name (read here: a bad entry stops the start).
        destinations = destinationrules.server_policy(
            settings.allow_loopback_endpoints, settings.forbid_addresses, settings.database_url
        )
        # Read before serving, so that a bad price book stops the server before it starts.
        self.price_book = offerings.load(settings.price_book)
        self.storage = Storage(
            settings.database_url,
            pool_size=settings.pool_size,
            watch_cache_capacity=settings.watch_cache_capacity,
            retention=settings.watch_retention,
            compaction_interval=settings.compaction_interval,
        )
        fee = PlatformFee(self.price_book.platform_fee.per_gpu_hour, self.price_book.platform_fee.per_host_hour)
        job_estimates = JobEstimates(
            self.storage, self.price_book.version, settings.funded_window, self.secret_keys, fee
        )
        self.registry = registry or catalog.registry(
            catalog.Dependencies(
                keyring=self.secret_keys,
                destinations=destinations,
                job_admission=job_estimates.admit,
                pipeline_admission=PipelineEstimates(job_estimates).admit,
            )
        )
        # Every Project in memory, kept current by the watch cache (ADR 0057): authorisation, admission and running
        # watches' re-checks read Projects from here.
        self.projects = ProjectView(self.storage)
        self.stores = {info.plural: GenericStore(self.storage, info, self.projects.get) for info in self.registry}
        # The services the HTTP routes call: every read and write of theirs goes through one of these or a store.
        self.listwatch = ListWatch(self.storage)
        self.logs = Logs(self.storage, self.stores["attempts"])
        self.credits = Credits(self.stores["projects"], self.storage)
        # Pools' join tokens and the hosts that join with them (ADR 0047).
        self.pools = PoolHosts(self.stores["pools"], self.stores["nodes"], self.stores["bootstraptokens"], self.storage)
        self.tokens = (
            TokenAuthenticator.from_file(settings.token_auth_file)
            if settings.token_auth_file
            else TokenAuthenticator({})
        )
        self.node_credentials = NodeCredentials(self.secret_keys, self._node, settings.node_credential_ttl)
        self.bootstrap_tokens = BootstrapTokenAuthenticator(self._bootstrap_token)
        self.metrics = Metrics()
        # A project the server creates at start may not be deleted; a deleted one's credit is closed (ADR 0037).
        self.project_deletion = ProjectDeletion(self.storage, settings.bootstrap_projects)
        self.stores["projects"].deletion = self.project_deletion.check
        self.garbage_collector = GarbageCollector(
            self.stores,
            resync=settings.gc_resync,
            purge_blobs=self._purge_blobs,
            close_credit=self.project_deletion.close,
        )
        # Opened here, so that a bad --blob-store stops the server before it starts.
        self.blob_store: ObjectStore | None = open_store(settings.blob_store) if settings.blob_store else None
        self.blobs = Blobs(self.storage, self.blob_store, settings)
        self.ledger = LedgerDoor(self.storage, self.price_book)
        graph = StoredNodeGraph(self.storage, self.blob_store)
        self.authorizer = Authorizer(self.projects.get, self._projects_for, graph)
        self.blob_collector = self._blob_collector()
        # The web console (ADR 0053): its sessions, and its static files read once here.
        self.console_sessions = ConsoleSessions(self.storage)
        self.console_assets = ConsoleAssets.load()
        self.ready = False

    async def start(self) -> None:
        await self.storage.start()
        await self.projects.start()
        for project in self.settings.bootstrap_projects:
            await bootstrap.ensure_project(self.stores["projects"], project)
            if self.settings.bootstrap_credits:
                await bootstrap.grant_initial_credits(
                    self.stores["projects"], self.storage, project, self.settings.bootstrap_credits
                )
        await offerings.sync(self.storage, self.price_book)
        self.garbage_collector.start()
        if self.blob_collector is not None:
            self.blob_collector.start()
        self.console_sessions.start()
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        await self.garbage_collector.stop()
        if self.blob_collector is not None:
            await self.blob_collector.stop()
        await self.console_sessions.stop()
        await self.projects.stop()
        await self.storage.stop()

    async def storage_reachable(self) -> bool:
        """Whether the database answers now (``/readyz``)."""
        try:
            await self.storage.current_rv()
        except Exception:  # any failure to reach the database means not ready
            return False
        return True

    def observe_storage(self) -> None:
        """Copy the storage's own figures (the watch cache's head, the committer's batches) into the metrics."""
        self.metrics.watch_cache_head.set(self.storage.watch_cache.head)
        self.metrics.commit_batches.set(self.storage.committer.batches)
        self.metrics.commit_writes.set(self.storage.committer.writes)

    def _blob_collector(self) -> BlobCollector | None:
        """Collects unreferenced blobs and charges projects' storage (ADR 0034); none without a blob store."""
        if self.blob_store is None:
            return None
        entry = self.price_book.storage
        settings = CollectionSettings(
            grace=self.settings.blob_grace_period,
            interval=self.settings.blob_collection_interval,
            hour=self.settings.storage_charge_interval,
            quota=self.settings.project_storage_quota,
            price=StoragePrice(entry.rate_per_gib_month, HOURS_PER_MONTH),
        )
        return BlobCollector(self.storage, self.blob_store, self.stores["projects"], settings)

    async def _purge_blobs(self, project: str) -> int:
        if self.blob_store is None:
            return 0
        return await blobcollection.purge(self.storage, self.blob_store, project)

    async def _node(self, name: str) -> dict[str, Any] | None:
        return await self.storage.get(Key("Node", "", name))

    async def _bootstrap_token(self, token_id: str) -> dict[str, Any] | None:
        return await self.storage.get(Key("BootstrapToken", "", token_id))

    async def _projects_for(self, principal: Principal) -> list[str]:
        return sorted(await self.projects.names_with_member(member_names(principal)))
