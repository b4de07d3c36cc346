"""Prometheus metrics of the controllers process (``nodus controllers --metrics-address``, ADR 0060).

What they answer is where a busy control plane waits (docs/benchmarks.md §13.2): for each controller's work
queue, how deep it is, how long a key waits ready before a worker takes it and how long a reconcile takes; for
the process's API client, how long requests wait for one of its connections and how long they take; for the
scheduler, how long a cycle takes and how many attempts it binds. The names follow client-go's workqueue
metrics (``workqueue_depth``, ``workqueue_queue_duration_seconds``, ...) under the ``nodus_`` prefix.

Everything is recorded on the event loop's thread. The endpoint is served from a thread of its own
(``prometheus_client``'s server): scraping reads plain numbers and never waits on the loop, so a busy loop
still answers and a slow scrape never slows a reconcile. It shows counts and timings only, no object names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nodus.client.rest import RequestTally

# From 1 ms to about 2 minutes: a key waits from nothing (an idle queue) to minutes (a backlog).
_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class QueueObserver:
    """One work queue's metrics: given to the queue (``WorkQueue.observer``) and used by its workers."""

    def __init__(self, metrics: ControllerMetrics, name: str) -> None:
        self._adds = metrics.adds.labels(name)
        self._retries = metrics.retries.labels(name)
        self._waits = metrics.queue_seconds.labels(name)
        self._works = metrics.work_seconds.labels(name)

    def added(self) -> None:
        self._adds.inc()

    def retried(self) -> None:
        self._retries.inc()

    def taken(self, waited: float) -> None:
        self._waits.observe(waited)

    def worked(self, seconds: float) -> None:
        """A reconcile of one key took ``seconds`` (whatever its outcome)."""
        self._works.observe(seconds)


class ControllerMetrics:
    """The controllers process's registry: work queues, the API client and the scheduler's cycles."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.adds = Counter(
            "nodus_workqueue_adds_total", "Keys added to a work queue.", ["name"], registry=self.registry
        )
        self.retries = Counter(
            "nodus_workqueue_retries_total",
            "Keys re-added after a backoff (a failed reconcile).",
            ["name"],
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            "nodus_workqueue_queue_duration_seconds",
            "How long a key waited ready before a worker took it.",
            ["name"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.work_seconds = Histogram(
            "nodus_workqueue_work_duration_seconds",
            "How long one reconcile took.",
            ["name"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.cycle_seconds = Histogram(
            "nodus_scheduler_cycle_duration_seconds",
            "One scheduling cycle, its writes included.",
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.bindings = Counter(
            "nodus_scheduler_bindings_total", "Attempts bound by the scheduler.", registry=self.registry
        )
        self._depths = _Depths()
        self.registry.register(self._depths)

    def queue(self, name: str, depth: Callable[[], int]) -> QueueObserver:
        """The observer of the work queue of controller ``name``; ``depth`` says how many keys are ready in it."""
        self._depths.sources[name] = depth
        return QueueObserver(self, name)

    def client(self, tally: RequestTally) -> None:
        """Report the API client's requests (``Client.requests``)."""
        self.registry.register(_ClientRequests(tally))

    def cycle(self, seconds: float, bound: int) -> None:
        """A scheduling cycle took ``seconds`` and bound ``bound`` attempts."""
        self.cycle_seconds.observe(seconds)
        self.bindings.inc(bound)

    def serve(self, address: str) -> Any:
        """Serve ``/metrics`` on ``address`` (``HOST:PORT``) from a thread of its own; returns the server, whose
        ``shutdown()`` stops it."""
        host, _, port = address.rpartition(":")
        server, _thread = start_http_server(int(port), host.strip("[]") or "127.0.0.1", registry=self.registry)
        return server


class _Depths(Collector):
    def __init__(self) -> None:
        self.sources: dict[str, Callable[[], int]] = {}

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("nodus_workqueue_depth", "Keys ready in a work queue.", labels=["name"])
        for name, depth in sorted(self.sources.items()):
            family.add_metric([name], depth())
        yield family


class _ClientRequests(Collector):
    def __init__(self, tally: RequestTally) -> None:
        self._tally = tally

    def collect(self) -> Iterator[Metric]:
        tally = self._tally
        yield CounterMetricFamily("nodus_client_requests", "API requests sent.", value=tally.count)
        yield CounterMetricFamily(
            "nodus_client_request_wait_seconds",
            "Seconds requests waited for one of the client's connections, summed.",
            value=tally.waiting,
        )
        yield CounterMetricFamily(
            "nodus_client_request_seconds",
            "Seconds from sending a request to its whole response, summed.",
            value=tally.sending,
        )
