"""The fake cloud's flags (``--provider fake``) and ``nodus fakehosts``, which plays every host of it in one process
(ADR 0059, docs/providers.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from nodus.apimachinery.units import parse_duration

if TYPE_CHECKING:
    from nodus.cloud.provider import Provider


def add_provider_flags(parser: argparse.ArgumentParser) -> None:
    """The controllers' flag of the fake cloud; its boot times and capacity are the ``--sim-*`` flags'."""
    parser.add_argument(
        "--fake-directory", type=Path, help="where the fake cloud hands hosts to `nodus fakehosts` (--provider fake)"
    )


def fake_provider(
    args: argparse.Namespace,
    data_dir: Path | None,
    boot_time_overrides: dict[str, timedelta],
    capacity_overrides: dict[str, int],
) -> Callable[[], Provider]:
    """The fake cloud as the controllers' provider factory, from their flags; its directory defaults to
    ``<data dir>/fakehosts`` (``nodus dev``) or ``$TMPDIR/nodus-fakehosts``."""
    import functools

    from nodus.cloud.fakecloud import FakeCloud, FakeCloudConfig

    default = data_dir / "fakehosts" if data_dir else Path(os.environ.get("TMPDIR", "/tmp")) / "nodus-fakehosts"
    config = FakeCloudConfig(
        directory=(args.fake_directory or default).resolve(),
        boot_time=args.sim_boot_time,
        boot_scale=args.sim_boot_scale,
        capacity=args.sim_capacity,
        boot_time_overrides=boot_time_overrides,
        capacity_overrides=capacity_overrides,
    )
    return functools.partial(FakeCloud, config)


def duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--directory",
        type=Path,
        required=True,
        help="the fake cloud's directory: the controllers' --fake-directory (hosts are handed over there)",
    )
    parser.add_argument(
        "--kubeconfig",
        required=True,
        help="the API server, its CA and the credential of the one shared watch of Attempts and Nodes (an "
        "administrator's or the controllers'; only read with); each host writes with its own node credential",
    )
    parser.add_argument("--server", help="the API server's URL for the hosts' requests (default: the kubeconfig's)")
    parser.add_argument("--certificate-authority", type=Path, help="the CA file that signs the API server")
    parser.add_argument("--heartbeat-interval", type=duration, default=timedelta(seconds=10))
    parser.add_argument(
        "--default-duration",
        type=duration,
        default=timedelta(seconds=5),
        help="how long a fake program runs when its Job sets no FAKEHOST_DURATION (default 5s)",
    )
    parser.add_argument(
        "--credential-lifetime",
        type=duration,
        help="ask for node credentials this short-lived (at least 10s; the server caps it); renewed halfway",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="joins and heartbeats in flight at once, each (default 16; the shared pool has 8 connections more)",
    )


def run(args: argparse.Namespace) -> None:
    from nodus.client import ClientConfig
    from nodus.cloud.fakehosts import FakeHosts, FakeHostsSettings

    observer = ClientConfig.from_kubeconfig(args.kubeconfig)
    server = ClientConfig(
        server=(args.server or observer.server).rstrip("/"),
        ca_file=str(args.certificate_authority.resolve()) if args.certificate_authority else observer.ca_file,
    )
    settings = FakeHostsSettings(
        directory=args.directory.resolve(),
        server=server,
        observer=observer,
        heartbeat_interval=args.heartbeat_interval,
        default_duration=args.default_duration,
        credential_lifetime=args.credential_lifetime,
        concurrency=max(args.concurrency, 1),
        # httpx's pool looks at every connection for every request it hands out: a pool no bigger than the requests
        # in flight keeps that cheap (a 2-core API server gains nothing from more).
        max_connections=max(args.concurrency, 1) + 8,
    )
    logging.getLogger("nodus.cloud.fakehosts").info("playing the fake hosts of %s", settings.directory)

    async def main() -> None:
        task = asyncio.ensure_future(FakeHosts(settings).run())
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
