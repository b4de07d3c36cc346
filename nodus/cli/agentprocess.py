"""``nodus agent``: the node agent's flags and process.

The agent reads the API server's address and CA from ``--server`` and ``--certificate-authority`` (or a
kubeconfig, whose user credentials it ignores: it exchanges its join token for a node credential of its own). It
stops cleanly on SIGTERM and SIGINT: it stops its attempts and reports them before exiting.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import socket
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from nodus.cli.processes import check_endpoints, duration

if TYPE_CHECKING:
    from nodus.client import ClientConfig

log = logging.getLogger("nodus")


def add_agent_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", help="the API server's URL (or take it from --kubeconfig)")
    parser.add_argument("--certificate-authority", type=Path, help="the CA file that signs the API server")
    parser.add_argument(
        "--kubeconfig",
        help="take the server and CA from this kubeconfig (default: $KUBECONFIG); never its user credentials",
    )
    parser.add_argument("--join-token", help="a bootstrap token (ID.SECRET) to exchange for this node's credential")
    parser.add_argument("--join-token-file", type=Path, help="a file holding the bootstrap token")
    parser.add_argument(
        "--credential-lifetime",
        type=duration,
        help="ask for node credentials this short-lived (at least 10s; the server caps it); renewed halfway",
    )
    parser.add_argument(
        "--node-name",
        default=socket.gethostname().lower(),
        help="the Node this agent registers and runs (default: this host's name, in lower case)",
    )
    parser.add_argument(
        "--offering",
        help="the offering id this host provides; omit it on a Pool's host (a pool join token), which reports the "
        "shape it discovers: vCPU, memory, disk, GPUs and their interconnect",
    )
    parser.add_argument(
        "--gpus", type=int, help="GPUs visible to programs (default: the offering's count, or those a pool host finds)"
    )
    parser.add_argument(
        "--runtime",
        choices=("auto", "podman", "bubblewrap", "unsandboxed"),
        default="auto",
        help="auto (the default) and podman run every program in its image (ADR 0040) and refuse to start without a "
        "working podman; bubblewrap sandboxes every program on the host's filesystem; unsandboxed runs programs as "
        "plain processes",
    )
    parser.add_argument("--work-dir", type=Path, default=Path("/var/lib/nodus/agent"), help="local scratch")
    parser.add_argument("--heartbeat-interval", type=duration, default=timedelta(seconds=10))
    parser.add_argument(
        "--trust-ca",
        type=Path,
        help="a PEM file of CA certificates trusted, beside the system's, for https inputs and git sources",
    )
    parser.add_argument(
        "--checkpoint-time-scale",
        type=float,
        default=1.0,
        help="multiply checkpoint intervals and waits by this (below 1 only for tests and demonstrations)",
    )
    parser.add_argument(
        "--advertise-address",
        default=None,
        help="the address a gang's other hosts reach this one at (default: this host name's address)",
    )
    parser.add_argument(
        "--allow-loopback-endpoints",
        action="store_true",
        help="let inputs, sources, S3 endpoints and sinks be on this host's loopback (tests, nodus dev); the API "
        "server's and --forbid-address endpoints stay refused",
    )
    parser.add_argument(
        "--forbid-address",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="an endpoint Jobs must never make the agent reach (repeatable), such as the control plane's database; "
        "the API server's own address always is",
    )
    parser.add_argument(
        "--insecure-registry",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a registry pulled from over plain HTTP or unverified TLS (repeatable), as Docker's "
        "insecure-registries; every other registry is pulled over verified TLS",
    )
    parser.add_argument(
        "--metadata-url",
        help="the instance metadata service (an EC2 host's http://169.254.169.254), polled every 5s for a spot "
        "interruption notice that the agent reports on its Node",
    )
    parser.add_argument(
        "--hide",
        action="append",
        default=[],
        metavar="DIR",
        help="a host directory sandboxed programs must not see (repeatable; the kubeconfig's directory always is)",
    )


def agent(args: argparse.Namespace) -> None:
    import httpx

    from nodus.agent import runtime as runtimes
    from nodus.agent.daemon import Agent, AgentSettings
    from nodus.agent.identity import IdentityError, NodeIdentity
    from nodus.client import Client, errors

    try:
        chosen = runtimes.select_runtime(args.runtime, args.work_dir.resolve() / "engine")
    except runtimes.RuntimeUnavailable as exc:
        raise SystemExit(f"nodus agent: {exc}") from None
    settings = AgentSettings(
        node_name=args.node_name,
        offering=args.offering,
        work_dir=args.work_dir.resolve(),
        gpus=args.gpus,
        heartbeat_interval=args.heartbeat_interval,
        trust_ca=str(args.trust_ca.resolve()) if args.trust_ca else None,
        checkpoint_time_scale=args.checkpoint_time_scale,
        advertise_address=args.advertise_address or socket.gethostbyname(socket.gethostname()),
        allow_loopback_endpoints=args.allow_loopback_endpoints,
        forbid_addresses=tuple(args.forbid_address),
        insecure_registries=tuple(args.insecure_registry),
        metadata_url=args.metadata_url,
    )
    check_endpoints("nodus agent: --forbid-address", settings.forbid_addresses)
    if not 0 < settings.checkpoint_time_scale <= 1000:
        raise SystemExit("nodus agent: --checkpoint-time-scale must be above 0")
    server, hidden = _agent_server(args)
    settings.hidden = (
        str(settings.work_dir),  # the node credential lives there (identity/), and every attempt's files
        *hidden,
        *(str(Path(d).resolve()) for d in args.hide),
    )
    join_token = args.join_token
    if args.join_token_file:
        join_token = args.join_token_file.read_text().strip()
    identity = NodeIdentity(
        server, args.node_name, args.offering, settings.work_dir, join_token, lifetime=args.credential_lifetime
    )

    async def main() -> None:
        try:
            await identity.obtain()
        except (IdentityError, errors.APIError, httpx.HTTPError) as exc:
            raise SystemExit(f"nodus agent: {exc}") from None
        async with Client(identity.config(), user_agent=f"nodus-agent/{args.node_name}") as client:
            node_agent = Agent(settings, client, chosen, identity)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(
                    signum,
                    functools.partial(node_agent.leave, f"signal {signum}", settings.shutdown_grace, expected=True),
                )
            await node_agent.run()

    asyncio.run(main())


def _agent_server(args: argparse.Namespace) -> tuple[ClientConfig, list[str]]:
    """The API server's address and CA, and the host paths they came from (which sandboxes must not see:
    a kubeconfig may sit beside credentials, and it names token and key files)."""
    from nodus.client import ClientConfig

    hidden: list[str] = []
    path = args.kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        config = ClientConfig.from_kubeconfig(path)
        hidden.append(str(Path(path).resolve().parent))
        hidden += [str(Path(f).resolve()) for f in config.referenced_files()]
        if config.token or config.cert_file:
            log.warning("nodus agent: the kubeconfig's user credentials are ignored; the agent uses its own")
    elif not args.server:
        raise SystemExit("nodus agent: name the API server with --server URL (or --kubeconfig FILE)")
    server = args.server or config.server
    ca = str(args.certificate_authority.resolve()) if args.certificate_authority else (config.ca_file if path else None)
    if args.join_token_file:
        hidden.append(str(args.join_token_file.resolve()))
    return ClientConfig(server=server.rstrip("/"), ca_file=ca), hidden
