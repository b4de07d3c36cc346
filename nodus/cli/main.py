"""``nodus``: the command line entry point."""

from __future__ import annotations

import argparse
import asyncio
import csv
import logging
import os
import secrets
import signal
import sys
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import uvloop

from nodus.api.auth.requestheader import RequestHeaderConfig
from nodus.api.server import APIServer
from nodus.api.settings import ServerSettings
from nodus.apimachinery.units import parse_duration
from nodus.cli import certificates, kubeconfig
from nodus.cli.serving import Listener, serve
from nodus.storage import database

log = logging.getLogger("nodus")


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _database_url(args: argparse.Namespace) -> str | None:
    return args.database_url or os.environ.get("NODUS_DATABASE_URL")


def _add_server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="PostgreSQL URL (default: $NODUS_DATABASE_URL)")
    parser.add_argument("--token-auth-file", type=Path, help='CSV of bearer tokens: token,user,uid,"group1,group2"')
    parser.add_argument(
        "--watch-retention",
        type=_duration,
        default=timedelta(minutes=15),
        help="how long the watch log keeps events; older watches and continue tokens get 410 Expired (default 15m)",
    )
    parser.add_argument("--watch-cache-size", type=int, default=20_000, help="events kept in memory per process")
    parser.add_argument(
        "--watch-bookmark-interval",
        type=_duration,
        default=timedelta(seconds=10),
        help="how often an idle watch that allows bookmarks gets one (default 10s)",
    )
    parser.add_argument("--external-url", default="", help="base URL of the docs links in error responses")


def _settings(args: argparse.Namespace, url: str, token_file: Path | None, **extra: object) -> ServerSettings:
    return ServerSettings(
        database_url=url,
        token_auth_file=token_file,
        watch_retention=args.watch_retention,
        watch_cache_capacity=args.watch_cache_size,
        external_url=args.external_url,
        bookmark_interval=args.watch_bookmark_interval.total_seconds(),
        **extra,  # type: ignore[arg-type]
    )


def _dev_tokens(path: Path) -> Path:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f'{secrets.token_urlsafe(32)},admin,admin,"system:masters"\n')
    return path


def _admin_token(path: Path) -> str:
    """The token of the first administrator in a token file (else the first token)."""
    first = ""
    with path.open(newline="") as handle:
        for row in csv.reader(handle):
            if not row or row[0].lstrip().startswith("#") or len(row) < 3:
                continue
            first = first or row[0].strip()
            if len(row) > 3 and "system:masters" in [g.strip() for g in row[3].split(",")]:
                return row[0].strip()
    if not first:
        raise SystemExit(f"{path} holds no token")
    return first


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run a server on uvloop (``asyncio.run`` would ignore uvicorn's loop setting)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def _terminate(signum: int, _: FrameType | None) -> None:
    raise SystemExit(0)


def dev(args: argparse.Namespace) -> None:
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    embedded: database.EmbeddedPostgres | None = None
    url = _database_url(args)
    try:
        if not url:
            embedded = database.EmbeddedPostgres(data_dir / "postgres")
            url = embedded.start()
        database.migrate(url)
        client_host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
        files = certificates.ensure_serving(data_dir / "pki", sorted({client_host, "127.0.0.1", "localhost"}))
        token_file = args.token_auth_file or _dev_tokens(data_dir / "tokens.csv")
        server_url = f"https://{client_host}:{args.port}"
        kubeconfig.write(data_dir / "kubeconfig", server_url, files.ca_cert, _admin_token(token_file))
        server = APIServer(_settings(args, url, token_file, bootstrap_projects=("default",)))
        listener = Listener(args.host, args.port, files.cert, files.key)
        _run(_serve_announced(server, listener, server_url, data_dir / "kubeconfig"))
    finally:
        if embedded is not None:
            embedded.stop()


async def _serve_announced(server: APIServer, listener: Listener, url: str, config: Path) -> None:
    ready = asyncio.Event()
    task = asyncio.ensure_future(serve(server, listener, ready))
    waiter = asyncio.ensure_future(ready.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if ready.is_set():
        print(f"Nodus is serving on {url}; to use it: export KUBECONFIG={config}", flush=True)
    waiter.cancel()
    await task


def apiserver(args: argparse.Namespace) -> None:
    url = _database_url(args)
    if not url:
        raise SystemExit("nodus apiserver needs --database-url or NODUS_DATABASE_URL")
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        raise SystemExit("--tls-cert-file and --tls-private-key-file go together")
    if args.migrate:
        database.migrate(url)
    requestheader = None
    if args.requestheader_client_ca_file:
        if not args.tls_cert_file:
            raise SystemExit("requestheader authentication needs TLS (--tls-cert-file, --tls-private-key-file)")
        requestheader = RequestHeaderConfig(
            client_ca_file=str(args.requestheader_client_ca_file),
            allowed_names=tuple(n for n in args.requestheader_allowed_names.split(",") if n),
            username_headers=tuple(h.lower() for h in args.requestheader_username_headers.split(",") if h),
            group_headers=tuple(h.lower() for h in args.requestheader_group_headers.split(",") if h),
            extra_header_prefixes=tuple(h.lower() for h in args.requestheader_extra_headers_prefix.split(",") if h),
        )
    settings = _settings(args, url, args.token_auth_file, requestheader=requestheader)
    listener = Listener(
        args.host, args.port, args.tls_cert_file, args.tls_private_key_file, args.requestheader_client_ca_file
    )
    print(
        f"Nodus API server serving on {'https' if args.tls_cert_file else 'http'}://{args.host}:{args.port}", flush=True
    )
    _run(serve(APIServer(settings), listener))


def migrate(args: argparse.Namespace) -> None:
    url = _database_url(args)
    if not url:
        raise SystemExit("nodus migrate needs --database-url or NODUS_DATABASE_URL")
    database.migrate(url)
    print("database schema is up to date")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="nodus", description="Nodus: a control plane for GPU batch work.")
    root.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = root.add_subparsers(dest="command", required=True)

    dev_cmd = commands.add_parser("dev", help="run the whole system locally (embedded PostgreSQL, TLS, kubeconfig)")
    dev_cmd.add_argument("--host", default="127.0.0.1")
    dev_cmd.add_argument("--port", type=int, default=8080)
    dev_cmd.add_argument("--data-dir", default=".nodus", help="where the database, certificates and kubeconfig live")
    _add_server_flags(dev_cmd)
    dev_cmd.set_defaults(run=dev)

    api = commands.add_parser("apiserver", help="serve the nodus.dev/v1 API")
    api.add_argument("--host", default="0.0.0.0")
    api.add_argument("--port", type=int, default=8443)
    api.add_argument("--tls-cert-file", type=Path)
    api.add_argument("--tls-private-key-file", type=Path)
    api.add_argument(
        "--requestheader-client-ca-file",
        type=Path,
        help="trust X-Remote-* headers only from client certificates signed by this CA",
    )
    api.add_argument(
        "--requestheader-allowed-names",
        default="",
        help="comma-separated common names allowed to send X-Remote-* headers (empty: any)",
    )
    api.add_argument("--requestheader-username-headers", default="X-Remote-User")
    api.add_argument("--requestheader-group-headers", default="X-Remote-Group")
    api.add_argument("--requestheader-extra-headers-prefix", default="X-Remote-Extra-")
    api.add_argument("--migrate", action="store_true", help="run database migrations before serving")
    _add_server_flags(api)
    api.set_defaults(run=apiserver)

    mig = commands.add_parser("migrate", help="bring the database schema up to date")
    mig.add_argument("--database-url", help="PostgreSQL URL (default: $NODUS_DATABASE_URL)")
    mig.set_defaults(run=migrate)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("alembic", "pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    args.run(args)


if __name__ == "__main__":
    main()
