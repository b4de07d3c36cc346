"""What a program is given on this host, and what of it may leave the host.

* The environment contract (:func:`environment`): the Job's literal ``env``, then Nodus's variables, which win
  (``NODUS_INDEX``, ``JOB_COMPLETION_INDEX``, the attempt and node, the visible GPUs); a gang rank's launcher adds
  its own (``nodus.agent.launchers``), the checkpoint and progress protocols theirs.
* The runtime's egress (:func:`egress_of`) and sidecars (:func:`sidecars_of`) from the pinned spec, and what
  the agent itself may reach on the attempt's behalf (:func:`reach_of`, ADR 0032).
* Secret values never leave the host: :func:`masked_values` lists what log shipping masks, and :func:`scrub`
  bounds a line for ``status.message``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from nodus.agent.gpus import CdiDevices
from nodus.agent.images import ImageCache
from nodus.agent.runtime import Egress, Sidecar
from nodus.apimachinery import destinations, units
from nodus.apis.v1 import objects
from nodus.apis.v1.attempt import AttemptSpec

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_WORKING_DIR = "/workspace"
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


@dataclass
class HostFacts:
    """What every attempt on this host sees of it."""

    node: str
    offering: str
    gpu_indexes: list[int]
    work_dir: Path
    hidden: tuple[str, ...] = ()
    trust_ca: str | None = None
    # The offering's mean time between interruptions (interruptible capacity), for the auto checkpoint interval.
    mtbi: timedelta | None = None
    # Shrinks checkpoint intervals and waits (tests run minutes of cadence in seconds).
    checkpoint_time_scale: float = 1.0
    # The address a gang's peers reach this host's mesh endpoint and rendezvous at.
    mesh_host: str = "127.0.0.1"
    # What the agent may connect to for a Job (inputs, sources, S3, sinks, the egress proxy's upstreams).
    destinations: destinations.Policy = field(default_factory=destinations.Policy)
    # A container runtime's image cache (None: the host runtimes, which run on the host's filesystem) and this host's
    # GPUs as CDI devices (None or empty: no real GPU devices to give, as on simulated hosts).
    images: ImageCache | None = None
    cdi: CdiDevices | None = None


def environment(attempt: objects.Attempt, host: HostFacts) -> dict[str, str]:
    """The environment contract: the Job's literal env, then Nodus's variables (which win)."""
    meta, spec = attempt.metadata, attempt.spec
    env = {"PATH": BASE_PATH, "HOME": spec.working_dir or DEFAULT_WORKING_DIR, "LANG": "C.UTF-8"}
    for item in spec.env or ():
        if item.value is not None:
            env[item.name] = item.value
        elif item.value_from is None:
            env[item.name] = ""
    devices = ",".join(str(i) for i in host.gpu_indexes)
    env.update(
        NODUS_INDEX=str(spec.index),
        JOB_COMPLETION_INDEX=str(spec.index),
        NODUS_JOB=spec.job,
        NODUS_PROJECT=meta.namespace or "",
        NODUS_ATTEMPT=meta.name,
        NODUS_ATTEMPT_NUMBER=str(spec.number),
        NODUS_NODE=host.node,
        NODUS_OFFERING=host.offering,
        NVIDIA_VISIBLE_DEVICES=devices or "void",
        CUDA_VISIBLE_DEVICES=devices,
    )
    return env


def egress_of(spec: AttemptSpec, host: HostFacts) -> Egress:
    """The runtime's egress from the attempt's ``network.egress`` (Open when unset)."""
    egress = spec.network.egress if spec.network else None
    if egress is None:
        return Egress(destinations=host.destinations)
    return Egress(
        policy=egress.policy,
        allow=tuple(egress.allow or ()),
        presets=tuple(egress.presets or ()),
        destinations=host.destinations,
    )


def reach_of(spec: AttemptSpec, host: HostFacts) -> destinations.Policy:
    """What the agent may connect to on the attempt's behalf: the host's policy narrowed to the Job's
    egress, which governs the agent's fetches as it governs the program (ADR 0032)."""
    egress = spec.network.egress if spec.network else None
    if egress is None:
        return host.destinations.with_egress("Open")
    return host.destinations.with_egress(egress.policy, egress.allow or (), egress.presets or ())


def sidecars_of(spec: AttemptSpec, env: dict[str, str], secret_env: dict[str, dict[str, str]]) -> tuple[Sidecar, ...]:
    """The attempt's sidecars, each with the program's environment plus its own ``env`` (literal values,
    and ``secretKeyRef`` values the preparation decoded from the pinned Secrets, in ``secret_env``)."""
    out: list[Sidecar] = []
    for sidecar in spec.sidecars or ():
        own = dict(env)
        for item in sidecar.env or ():
            if item.value is not None:
                own[item.name] = item.value
        own.update(secret_env.get(sidecar.name, {}))
        timeout = units.parse_duration(sidecar.startup_timeout).total_seconds()
        out.append(Sidecar(name=sidecar.name, argv=list(sidecar.command or ()), env=own, startup_timeout=timeout))
    return tuple(out)


# Shorter values would mask ordinary words ("true", "1"); a Secret that short is no secret in a log.
MIN_MASKED_LENGTH = 4


def masked_values(secrets: dict[str, dict[str, bytes]]) -> list[str]:
    """The texts to mask in output: every Secret value, and each of its lines, longest first."""
    values: set[str] = set()
    for keys in secrets.values():
        for raw in keys.values():
            text = raw.decode("utf-8", "replace").strip()
            for candidate in (text, *text.splitlines()):
                if len(candidate.strip()) >= MIN_MASKED_LENGTH:
                    values.add(candidate.strip())
    return sorted(values, key=len, reverse=True)


def scrub(line: str, limit: int = 400) -> str:
    """A log line fit for ``status.message``: no terminal escapes or control characters, bounded."""
    clean = _CONTROL.sub("", line).rstrip()
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"
