"""``nodus pools``: a project's Pools of hosts, for its Owners (ADR 0047).

* ``nodus pools join-token POOL [--project P] [--ttl 1h] [--description D]`` mints a join token of the
  pool and prints it, then the one command to run on the host::

      abc123.0123456789abcdef
      # on the host (valid until 2026-12-01T13:00:00Z; revoke: nodus pools revoke-token POOL abc123 --project P):
      # nodus agent --server https://nodus.example:8443 --certificate-authority ca.crt --join-token abc123.0123...

  The token is shown this once: the server keeps only its hash.
* ``nodus pools tokens POOL`` lists the pool's tokens (id, expiry, last use, the nodes that joined with
  each), never a secret; ``nodus pools revoke-token POOL ID`` revokes one. Hosts that joined keep their
  credentials: delete a host's Node to revoke it.

The project is ``--project``, else the kubeconfig context's namespace. Every command reaches the API
with the kubeconfig's credentials (``--kubeconfig``, else ``$KUBECONFIG``).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from nodus.cli.processes import duration, kubeconfig_path

if TYPE_CHECKING:
    from nodus.client import Client, ClientConfig

T = TypeVar("T")
API = "/apis/nodus.dev/v1"


def add_pool_commands(commands: Any) -> None:
    """Add ``join-token``, ``tokens`` and ``revoke-token`` to the ``nodus pools`` subcommands."""
    join = commands.add_parser("join-token", help="print a join token of a pool and the command a host joins with")
    join.add_argument("pool", metavar="POOL", help="the Pool's name")
    join.add_argument("--ttl", type=duration, default=timedelta(hours=1), help="how long it works (default 1h)")
    join.add_argument("--description", default="", help="what the token is for")
    tokens = commands.add_parser("tokens", help="list a pool's join tokens (never their secrets)")
    tokens.add_argument("pool", metavar="POOL", help="the Pool's name")
    revoke = commands.add_parser("revoke-token", help="revoke one of a pool's join tokens")
    revoke.add_argument("pool", metavar="POOL", help="the Pool's name")
    revoke.add_argument("id", metavar="ID", help="the token's id (the part before the dot)")
    for parser, run in ((join, "join_token"), (tokens, "list_tokens"), (revoke, "revoke_token")):
        parser.add_argument("--project", "-n", help="the pool's project (default: the kubeconfig's namespace)")
        parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")
        parser.set_defaults(run=f"pools:{run}")


def join_token(args: argparse.Namespace) -> None:
    config, project = _target(args)
    spec: dict[str, Any] = {"expirationSeconds": int(args.ttl.total_seconds())}
    if args.description:
        spec["description"] = args.description
    body = {"apiVersion": "nodus.dev/v1", "kind": "PoolJoinTokenRequest", "spec": spec}

    async def mint(client: Client) -> dict[str, Any]:
        response = await client.request("POST", f"{_path(project, args.pool)}/jointokens", json=body)
        return dict(response.json())

    status = _call(config, mint)["status"]
    command = ["nodus", "agent", "--server", config.server, "--certificate-authority", "ca.crt"]
    command += ["--join-token", status["token"]]
    print(status["token"])
    print(
        f"# on the host (valid until {status['expirationTimestamp']}; revoke: nodus pools revoke-token {args.pool} "
        f"{status['id']} --project {project}):"
    )
    print("# " + " ".join(shlex.quote(part) for part in command))
    print("# (ca.crt: the CA certificate that signs the API server, as in your kubeconfig; --node-name defaults")
    print("#  to the host's name)")


def list_tokens(args: argparse.Namespace) -> None:
    config, project = _target(args)

    async def listed(client: Client) -> dict[str, Any]:
        return dict((await client.request("GET", f"{_path(project, args.pool)}/jointokens")).json())

    rows = [("ID", "EXPIRES", "EXPIRED", "LAST-USED", "NODES", "DESCRIPTION")]
    for item in _call(config, listed)["items"]:
        nodes = ",".join(item.get("nodes") or []) or "<none>"
        rows.append(
            (
                item["id"],
                item["expiration"],
                "yes" if item.get("expired") else "no",
                item.get("lastUsedTime") or "<never>",
                nodes,
                item.get("description") or "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def revoke_token(args: argparse.Namespace) -> None:
    config, project = _target(args)

    async def revoke(client: Client) -> None:
        await client.request("DELETE", f"{_path(project, args.pool)}/jointokens/{args.id}")

    _call(config, revoke)
    print(f"join token {args.id} of pool {args.pool} revoked (hosts that joined with it stay: delete their Nodes)")


def _target(args: argparse.Namespace) -> tuple[ClientConfig, str]:
    from nodus.client import ClientConfig

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))
    project = args.project or config.namespace
    if not project:
        raise SystemExit("name the pool's project with --project P (the kubeconfig's context names none)")
    return config, project


def _path(project: str, pool: str) -> str:
    return f"{API}/namespaces/{project}/pools/{pool}"


def _call(config: ClientConfig, call: Callable[[Client], Awaitable[T]]) -> T:
    """Run ``call`` with a client of ``config``; an API error exits with the server's message and fix."""
    from nodus.client import Client, errors

    async def main() -> T:
        async with Client(config, user_agent="nodus-cli") as client:
            return await call(client)

    try:
        return asyncio.run(main())
    except errors.APIError as exc:
        fix = exc.body.get("fix")
        causes = "".join(f"\n  {c.get('field')}: {c.get('message')}" for c in exc.causes if c.get("field"))
        shown = f"Error from server ({exc.reason}): {exc.message}{causes}" + (f"\n{fix}" if fix else "")
        raise SystemExit(shown) from None
