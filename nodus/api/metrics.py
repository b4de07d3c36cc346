"""Prometheus metrics of the API server (``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    """One registry per server, so that tests can run several servers in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "nodus_apiserver_requests_total",
            "API requests by verb, resource and HTTP code.",
            ["verb", "resource", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "nodus_apiserver_request_duration_seconds",
            "API request latency (to the first byte for watches).",
            ["verb", "resource"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.watchers = Gauge(
            "nodus_apiserver_watchers", "Open watches by resource.", ["resource"], registry=self.registry
        )
        self.watch_events = Counter(
            "nodus_apiserver_watch_events_sent_total",
            "Watch events sent to clients.",
            ["resource"],
            registry=self.registry,
        )
        self.watch_cache_head = Gauge(
            "nodus_watch_cache_resource_version",
            "Newest resourceVersion read into the watch cache.",
            registry=self.registry,
        )
        self.commit_batches = Gauge(
            "nodus_storage_commit_batches", "Write batches committed by this process.", registry=self.registry
        )
        self.commit_writes = Gauge(
            "nodus_storage_committed_writes", "Writes committed by this process.", registry=self.registry
        )
