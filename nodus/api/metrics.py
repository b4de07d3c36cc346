"""Prometheus metrics of the API server (``/metrics``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class Tally:
    """One label's count of a hot-path counter: a plain integer, bumped on the event loop's thread.

    A prometheus ``Counter`` takes a lock per increment; fanning an event out to a thousand watchers
    would take it a thousand times. The count is read when ``/metrics`` is scraped."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class _TallyCounter(Collector):
    """A counter family whose values are :class:`Tally` objects, one per label value."""

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self._name, self._documentation, self._label = name, documentation, label
        self._tallies: dict[str, Tally] = {}

    def labels(self, value: str) -> Tally:
        return self._tallies.setdefault(value, Tally())

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self._name, self._documentation, labels=[self._label])
        for value, tally in sorted(self._tallies.items()):
            family.add_metric([value], tally.count)
        yield family


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
        self.watch_events = _TallyCounter(
            "nodus_apiserver_watch_events_sent", "Watch events sent to clients.", "resource"
        )
        self.registry.register(self.watch_events)
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
