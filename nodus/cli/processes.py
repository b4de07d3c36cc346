"""``nodus controllers``, and what the long-running processes share (``nodus agent`` is ``agentprocess``).

The controllers read the API server's address and credentials from a kubeconfig (``--kubeconfig``, else
``$KUBECONFIG``). They stop cleanly on SIGTERM and SIGINT and release their Lease, so a standby takes over at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus.apimachinery.units import parse_duration
from nodus.cli import awsflags, fakehosts

if TYPE_CHECKING:
    from nodus.controllers.assembly import ControllerSettings

log = logging.getLogger("nodus")


def duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def listen_address(text: str) -> str:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) to listen on."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT, for example 127.0.0.1:9464")
    return text


def kubeconfig_path(args: argparse.Namespace) -> Path:
    path = args.kubeconfig or os.environ.get("KUBECONFIG")
    if not path:
        raise SystemExit("name the API server with --kubeconfig FILE or $KUBECONFIG")
    return Path(path)


def add_controller_flags(parser: argparse.ArgumentParser, *, with_kubeconfig: bool = True) -> None:
    if with_kubeconfig:
        parser.add_argument("--kubeconfig", help="the API server and credentials (default: $KUBECONFIG)")
    parser.add_argument("--identity", help="this process's name in the leader Lease (default: host-pid)")
    parser.add_argument("--workers", type=int, default=8, help="workers per controller (default 8)")
    parser.add_argument(
        "--metrics-address",
        type=listen_address,
        help="serve Prometheus metrics (work queues, API requests, scheduling cycles) at http://HOST:PORT/metrics; "
        "bind it to a private address (default: not served)",
    )
    parser.add_argument(
        "--node-grace", type=duration, default=timedelta(seconds=40), help="heartbeat silence before a node is Lost"
    )
    parser.add_argument(
        "--boot-timeout", type=duration, default=timedelta(minutes=15), help="how long a host may take to register"
    )
    parser.add_argument("--lease-duration", type=duration, default=timedelta(seconds=15), help="leader Lease term")
    parser.add_argument(
        "--funded-window",
        type=duration,
        default=timedelta(minutes=10),
        help="how much running time an attempt's hold funds before it is extended (default 10m)",
    )
    parser.add_argument(
        "--storage-charge-interval",
        type=duration,
        default=timedelta(hours=1),
        help="how long one billed hour of stored bytes lasts; for tests only (default 1h, billed as an hour always)",
    )
    parser.add_argument(
        "--renew-deadline", type=duration, default=timedelta(seconds=10), help="leader renewal deadline"
    )
    parser.add_argument("--retry-period", type=duration, default=timedelta(seconds=2), help="leader renewal period")
    parser.add_argument(
        "--provider",
        choices=("sim", "fake", "aws", "none"),
        default="sim",
        help="the cloud that supplies hosts: sim (agent processes on this machine), fake (hosts a `nodus fakehosts` "
        "process plays, --fake-directory; boot times and capacity from the --sim-* flags), aws (EC2, the --aws-* "
        "flags), "
        "none (only pool hosts and agents started by hand; no Node is ever created for an offering)",
    )
    awsflags.add_aws_flags(parser)
    parser.add_argument("--sim-work-dir", type=Path, help="where simulated hosts keep their files")
    fakehosts.add_provider_flags(parser)
    parser.add_argument(
        "--sim-boot-time", type=duration, help="a fixed boot time for every simulated host (default: the offering's)"
    )
    parser.add_argument(
        "--sim-boot-scale", type=float, default=0.05, help="scale of the offerings' boot times (default 0.05)"
    )
    parser.add_argument("--sim-capacity", type=int, default=4, help="hosts per offering in the simulated cloud")
    parser.add_argument(
        "--sim-capacity-for",
        action="append",
        default=[],
        metavar="OFFERING=HOSTS",
        help="the capacity of one offering (repeatable); 0 makes it unavailable",
    )
    parser.add_argument(
        "--sim-boot-time-for",
        action="append",
        default=[],
        metavar="OFFERING=DURATION",
        help="a boot time for one offering (repeatable), e.g. to catch a host while it boots",
    )
    parser.add_argument(
        "--sim-runtime",
        choices=("auto", "podman", "bubblewrap", "unsandboxed"),
        default="auto",
        help="the runtime simulated hosts' agents use",
    )
    parser.add_argument(
        "--sim-agent-insecure-registry",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="simulated agents' --insecure-registry (repeatable): registries pulled from over plain HTTP",
    )
    parser.add_argument(
        "--sim-heartbeat-interval", type=duration, default=timedelta(seconds=2), help="simulated agents' heartbeat"
    )
    parser.add_argument(
        "--sim-agent-trust-ca", type=Path, help="a CA certificate file simulated agents trust (see agent --trust-ca)"
    )
    parser.add_argument(
        "--sim-agent-allow-loopback-endpoints",
        action="store_true",
        help="simulated agents' --allow-loopback-endpoints (tests: their inputs and sinks are on this machine)",
    )
    parser.add_argument(
        "--sim-agent-forbid-address",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="simulated agents' --forbid-address (repeatable), such as the control plane's database",
    )
    parser.add_argument(
        "--sim-checkpoint-time-scale",
        type=float,
        default=1.0,
        help="simulated agents' --checkpoint-time-scale (tests: 0.05 turns a 1m interval into 3s); gang "
        "checkpoint intervals, which the Job controller keeps, are scaled the same",
    )
    parser.add_argument(
        "--sim-assembly-time-scale",
        type=float,
        default=1.0,
        help="multiplies gang startupTimeouts (tests: 0.02 turns the 5m minimum into 6s)",
    )
    parser.add_argument(
        "--sim-boot-hangs",
        action="append",
        default=[],
        metavar="OFFERING",
        help="hosts of this offering boot but never start their agent (repeatable): a gang member that never comes",
    )


def controller_settings(args: argparse.Namespace, kubeconfig: Path, data_dir: Path | None = None) -> ControllerSettings:
    """The controllers' settings from their flags; the provider is built here (``--provider``), as the controllers
    know none by name."""
    from nodus.api import offerings
    from nodus.cloud.provider import Provider
    from nodus.cloud.simulated import SimulatedCloud, SimulatedCloudConfig
    from nodus.controllers.assembly import ControllerSettings
    from nodus.controllers.jobs.gangplanning import TimeScales
    from nodus.scheduler.capacity import PlatformFee

    provider: Callable[[], Provider] | None = None
    scales = TimeScales()
    if args.provider == "sim":
        default = data_dir / "hosts" if data_dir else Path(os.environ.get("TMPDIR", "/tmp")) / "nodus-hosts"
        work = args.sim_work_dir or default
        sim = SimulatedCloudConfig(
            kubeconfig=kubeconfig.resolve(),
            work_dir=work.resolve(),
            boot_time=args.sim_boot_time,
            boot_scale=args.sim_boot_scale,
            capacity=args.sim_capacity,
            runtime=args.sim_runtime,
            heartbeat_interval=args.sim_heartbeat_interval,
            boot_time_overrides=dict(_pair(text) for text in args.sim_boot_time_for),
            capacity_overrides=dict(_count(text) for text in args.sim_capacity_for),
            agent_trust_ca=args.sim_agent_trust_ca.resolve() if args.sim_agent_trust_ca else None,
            agent_allow_loopback_endpoints=args.sim_agent_allow_loopback_endpoints,
            agent_forbid_addresses=tuple(args.sim_agent_forbid_address),
            agent_insecure_registries=tuple(args.sim_agent_insecure_registry),
            checkpoint_time_scale=args.sim_checkpoint_time_scale,
            boot_hangs=frozenset(args.sim_boot_hangs),
        )
        check_endpoints("--sim-agent-forbid-address", sim.agent_forbid_addresses)
        provider = functools.partial(SimulatedCloud, sim)
        # The Job controller keeps gang checkpoint intervals, scaled as the simulated agents scale theirs.
        scales = TimeScales(args.sim_assembly_time_scale, args.sim_checkpoint_time_scale)
    elif args.provider == "fake":
        overrides = dict(_pair(text) for text in args.sim_boot_time_for), dict(_count(t) for t in args.sim_capacity_for)
        provider = fakehosts.fake_provider(args, data_dir, *overrides)
    elif args.provider == "aws":
        provider = awsflags.aws_provider(args, kubeconfig)
    if args.storage_charge_interval <= timedelta(0):
        raise SystemExit("--storage-charge-interval must be longer than 0s")
    # The scheduler prices pool attempts at the fee of the price book the API servers serve (nodus dev: the same
    # flag), so that an estimate and the placement it previews charge the same rate.
    fee = offerings.load(getattr(args, "price_book", None)).platform_fee
    settings = ControllerSettings(
        kubeconfig=kubeconfig,
        workers=args.workers,
        node_grace=args.node_grace,
        boot_timeout=args.boot_timeout,
        lease_duration=args.lease_duration.total_seconds(),
        renew_deadline=args.renew_deadline.total_seconds(),
        retry_period=args.retry_period.total_seconds(),
        funded_window=args.funded_window,
        storage_hour=args.storage_charge_interval,
        provider=provider,
        sweep_interval=args.aws_sweep_interval,
        time_scales=scales,
        platform_fee=PlatformFee(fee.per_gpu_hour, fee.per_host_hour),
        metrics_address=getattr(args, "metrics_address", None),
    )
    if args.identity:
        settings.identity = args.identity
    return settings


def check_endpoints(flag: str, texts: tuple[str, ...] | list[str]) -> None:
    """Exit with a message naming ``flag`` unless every entry is ``HOST[:PORT]``."""
    from nodus.apimachinery.destinations import Endpoint

    for text in texts:
        try:
            Endpoint.parse(text)
        except ValueError as exc:
            raise SystemExit(f"{flag}: {exc}") from None


def _pair(text: str) -> tuple[str, timedelta]:
    offering, _, value = text.partition("=")
    if not offering or not value:
        raise SystemExit(f"--sim-boot-time-for wants OFFERING=DURATION, not {text!r}")
    return offering, duration(value)


def _count(text: str) -> tuple[str, int]:
    offering, _, value = text.partition("=")
    if not offering or not value.isdigit():
        raise SystemExit(f"--sim-capacity-for wants OFFERING=HOSTS, not {text!r}")
    return offering, int(value)


def controllers(args: argparse.Namespace) -> None:
    from nodus.controllers import assembly

    settings = controller_settings(args, kubeconfig_path(args))
    _run_until_signalled(assembly.run(settings))


def _run_until_signalled(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` until it ends or SIGTERM/SIGINT cancels it (its cleanup then runs)."""

    async def wrapper() -> None:
        task = asyncio.ensure_future(main)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(wrapper())
