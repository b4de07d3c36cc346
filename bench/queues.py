"""Where the controllers wait, from their own metrics (``nodus controllers --metrics-address``): per work queue, the
reconciles run, the mean time a key waited ready and the mean reconcile, and the deepest the queue was when sampled;
for the process's API client, the requests sent, the mean wait for a connection and the mean request; for the
scheduler, its cycles, bindings and mean cycle. Figures are differences of two scrapes around a phase of a run
(``bench/scale.py``'s busy phase), so whatever ran before it does not count.
"""

from __future__ import annotations

import re
import urllib.request
from typing import Any

_SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?:\{name="(?P<queue>[^"]*)"\})? (?P<value>\S+)$')


def scrape(address: str) -> dict[tuple[str, str], float]:
    """The samples of ``http://{address}/metrics`` this module reads, keyed by (metric name, queue name or "")."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None:
            samples[(match["name"], match["queue"] or "")] = float(match["value"])
    return samples


def depths(samples: dict[tuple[str, str], float]) -> dict[str, float]:
    return {queue: value for (name, queue), value in samples.items() if name == "nodus_workqueue_depth"}


def summary(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], peak_depth: dict[str, float]
) -> dict[str, Any]:
    """What happened between the scrapes ``before`` and ``after``; ``peak_depth`` per queue from samples between."""

    def delta(name: str, queue: str = "") -> float:
        return after.get((name, queue), 0.0) - before.get((name, queue), 0.0)

    queues = {}
    for queue in sorted({q for (name, q) in after if name == "nodus_workqueue_work_duration_seconds_count"}):
        works = delta("nodus_workqueue_work_duration_seconds_count", queue)
        taken = delta("nodus_workqueue_queue_duration_seconds_count", queue)
        if not works:
            continue
        queues[queue] = {
            "reconciles": works,
            "work_mean_ms": 1000 * delta("nodus_workqueue_work_duration_seconds_sum", queue) / works,
            "wait_mean_s": delta("nodus_workqueue_queue_duration_seconds_sum", queue) / taken if taken else 0.0,
            "retries": delta("nodus_workqueue_retries_total", queue),
            "peak_depth": peak_depth.get(queue, 0.0),
        }
    requests = delta("nodus_client_requests_total")
    cycles = delta("nodus_scheduler_cycle_duration_seconds_count")
    return {
        "queues": queues,
        "client": {
            "requests": requests,
            "wait_mean_ms": 1000 * delta("nodus_client_request_wait_seconds_total") / requests if requests else 0.0,
            "request_mean_ms": 1000 * delta("nodus_client_request_seconds_total") / requests if requests else 0.0,
        },
        "scheduler": {
            "cycles": cycles,
            "bindings": delta("nodus_scheduler_bindings_total"),
            "cycle_mean_ms": 1000 * delta("nodus_scheduler_cycle_duration_seconds_sum") / cycles if cycles else 0.0,
        },
    }


def busiest(summary_: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The queues of ``summary_``, the one whose reconciles took the most time in all first."""
    return sorted(summary_["queues"].items(), key=lambda kv: -kv[1]["reconciles"] * kv[1]["work_mean_ms"])


def table(summary_: dict[str, Any], jobs: int) -> list[str]:
    """Lines for the benchmark's notes: the busiest queues first, then the client and the scheduler."""
    lines = []
    for queue, q in busiest(summary_):
        lines.append(
            f"{queue}: {q['reconciles']:.0f} reconciles ({q['reconciles'] / jobs:.1f}/Job), "
            f"{q['work_mean_ms']:.0f} ms each, keys waited {q['wait_mean_s']:.1f} s on average, "
            f"peak depth {q['peak_depth']:.0f}, {q['retries']:.0f} retries"
        )
    c, s = summary_["client"], summary_["scheduler"]
    lines.append(
        f"API client: {c['requests']:.0f} requests ({c['requests'] / jobs:.1f}/Job), waited {c['wait_mean_ms']:.0f} ms "
        f"for a connection, {c['request_mean_ms']:.0f} ms per request"
    )
    lines.append(f"scheduler: {s['cycles']:.0f} cycles, {s['bindings']:.0f} bindings, {s['cycle_mean_ms']:.0f} ms each")
    return lines
