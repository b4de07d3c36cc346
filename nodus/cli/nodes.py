"""``nodus nodes join-token``: a bootstrap token for a host to join (administrators).

The token's secret is made here and sent once (the server keeps only its hash), then printed with
the command to run on the host. ``kubectl delete bootstraptoken ID`` revokes it (ADR 0035).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shlex
import string
from datetime import timedelta

from nodus.apimachinery import units
from nodus.cli.processes import duration, kubeconfig_path

_ALPHABET = string.ascii_lowercase + string.digits


def add_join_token_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", help="bind the token to this node name (default: any name)")
    parser.add_argument("--offering", help="the offering the host provides, for the printed command")
    parser.add_argument("--ttl", type=duration, default=timedelta(hours=1), help="how long it works (default 1h)")
    parser.add_argument("--description", default="", help="what the token is for")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def join_token(args: argparse.Namespace) -> None:
    from nodus.client import Client, ClientConfig, errors

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))
    token_id = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    spec = {"secret": secret, "expiration": units.format_time(units.now() + args.ttl)}
    if args.node_name:
        spec["nodeName"] = args.node_name
    if args.description:
        spec["description"] = args.description
    body = {"apiVersion": "nodus.dev/v1", "kind": "BootstrapToken", "metadata": {"name": token_id}, "spec": spec}

    async def main() -> None:
        async with Client(config, user_agent="nodus-cli") as client:
            try:
                await client.create("bootstraptokens", body)
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None

    asyncio.run(main())
    token = f"{token_id}.{secret}"
    command = ["nodus", "agent", "--server", config.server]
    if config.ca_file:
        command += ["--certificate-authority", "CA_FILE"]
    command += ["--join-token", token, "--node-name", args.node_name or "NODE_NAME"]
    command += ["--offering", args.offering or "OFFERING"]
    print(token)
    print(f"# on the host (valid until {spec['expiration']}; revoke: kubectl delete bootstraptoken {token_id}):")
    print("# " + " ".join(shlex.quote(part) for part in command))
