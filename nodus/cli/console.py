"""``nodus console``: print a one-time link that logs this kubeconfig's user in to the web console.

The API server mints the link (``POST /console/api/logincodes``, ADR 0053) for whoever the kubeconfig
authenticates as; it works once, within five minutes. Only the link goes to stdout (so that
``xdg-open "$(nodus console)"`` works); what it is and until when goes to stderr.

Flags only at import (this module is imported by every ``nodus`` command); the work is in :func:`console`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodus.api.server import APIServer


def add_console_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def console(args: argparse.Namespace) -> None:
    import asyncio

    import httpx

    from nodus.cli.processes import kubeconfig_path
    from nodus.client import Client, ClientConfig, errors

    path = kubeconfig_path(args)
    try:
        config = ClientConfig.from_kubeconfig(path)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"nodus console: cannot read the kubeconfig {path}: {exc}") from None

    async def mint() -> dict[str, str]:
        async with Client(config, user_agent="nodus-cli") as client:
            response = await client.request("POST", "/console/api/logincodes")
            return dict(response.json())

    try:
        link = asyncio.run(mint())
    except errors.APIError as exc:
        raise SystemExit(f"nodus console: the API server refused a login link: {exc}") from None
    except httpx.HTTPError as exc:
        raise SystemExit(
            f"nodus console: cannot reach the API server at {config.server} ({exc or type(exc).__name__}); "
            "is it running (nodus dev), and is this the right kubeconfig?"
        ) from None
    print(link["url"], flush=True)
    print(
        f"Open this link to log in to the web console; it works once, until {link['expiresAt']}.",
        file=sys.stderr,
    )


async def dev_login_link(server: APIServer, url: str, config: Path) -> str | None:
    """A fresh one-time login link for the user of ``config`` (``nodus dev``'s administrator), minted by the
    in-process ``server`` once it serves; None when that kubeconfig's token is not one of the server's users."""
    from nodus.client import ClientConfig

    token = ClientConfig.from_kubeconfig(config).token
    principal = server.tokens.authenticate(token) if token else None
    if principal is None:
        return None
    code = await server.console_sessions.issue_code(principal)
    return f"{url}/console/login?code={code.code}"
