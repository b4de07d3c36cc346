"""The server commands: ``nodus dev`` (everything in one process), ``nodus apiserver`` and ``nodus migrate``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import hashlib
import logging
import os
import secrets
import socket
from collections.abc import Coroutine
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import uvloop

from nodus.api.auth.principal import CONTROLLERS_GROUP
from nodus.api.auth.requestheader import RequestHeaderConfig
from nodus.api.server import APIServer
from nodus.api.settings import ServerSettings
from nodus.apimachinery.sealing import KeyFileError, Keyring
from nodus.cli import certificates, console, devregistry, kubeconfig, processes
from nodus.cli.serving import Listener, serve
from nodus.controllers import assembly
from nodus.controllers.assembly import ControllerSettings
from nodus.storage import database

log = logging.getLogger("nodus")


def _database_url(args: argparse.Namespace) -> str | None:
    return args.database_url or os.environ.get("NODUS_DATABASE_URL")


def _settings(args: argparse.Namespace, url: str, token_file: Path | None, **extra: object) -> ServerSettings:
    return ServerSettings(
        database_url=url,
        token_auth_file=token_file,
        watch_retention=args.watch_retention,
        watch_cache_capacity=args.watch_cache_size,
        external_url=args.external_url,
        default_image=args.default_image or "",
        bookmark_interval=args.watch_bookmark_interval.total_seconds(),
        min_request_timeout=args.min_request_timeout.total_seconds(),
        max_watches_per_user=args.max_watches_per_user,
        max_log_follows_per_user=args.max_log_follows_per_user,
        price_book=args.price_book,
        blob_store=args.blob_store,
        funded_window=args.funded_window,
        max_blob_size=args.max_blob_size,
        project_storage_quota=args.project_storage_quota,
        blob_grace_period=args.blob_grace_period,
        blob_collection_interval=args.blob_collection_interval,
        storage_charge_interval=args.storage_charge_interval,
        allow_loopback_endpoints=args.allow_loopback_endpoints,
        forbid_addresses=(*args.forbid_address, _listening(args)),
        **extra,  # type: ignore[arg-type]
    )


def _listening(args: argparse.Namespace) -> str:
    """The API server's listening endpoint as HOST:PORT (all addresses: ``0.0.0.0``)."""
    host = args.host or "0.0.0.0"
    return f"[{host}]:{args.port}" if ":" in host else f"{host}:{args.port}"


def _database_endpoint(url: str) -> list[str]:
    """The database's HOST:PORT when it is reached over TCP (a unix socket is refused anyway)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return []
    return [f"[{parts.hostname}]:{parts.port or 5432}"]


# What nodus dev grants project "default" once, so that a new user can run Jobs at once.
DEV_CREDITS = Decimal("100")


def _dev_tokens(path: Path) -> Path:
    """The data dir's token file: an administrator (for people) and the controllers' own identity (ADR 0035);
    a file from an earlier version without the controllers' line gets it appended."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f'{secrets.token_urlsafe(32)},admin,admin,"system:masters"\n')
    if _group_token(path, CONTROLLERS_GROUP) is None:
        with path.open("a") as handle:
            handle.write(f'{secrets.token_urlsafe(32)},nodus-controllers,nodus-controllers,"{CONTROLLERS_GROUP}"\n')
    return path


def _group_token(path: Path, group: str) -> str | None:
    """The token of the first line of a token file whose groups include ``group``."""
    with path.open(newline="") as handle:
        for row in csv.reader(handle):
            if not row or row[0].lstrip().startswith("#") or len(row) < 4:
                continue
            if group in [g.strip() for g in row[3].split(",")]:
                return row[0].strip()
    return None


def _dev_secret_keys(path: Path) -> Path:
    """The data dir's key file for Secret values, created with one random key on first start."""
    if not path.exists():
        Keyring.generate(path)
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


def dev(args: argparse.Namespace) -> None:
    """Everything in one process: embedded PostgreSQL, the API server over TLS, the controllers and the
    simulated cloud (whose hosts are agent processes), and a kubeconfig for kubectl."""
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    embedded: database.EmbeddedPostgres | None = None
    registry: devregistry.DevRegistry | None = None
    url = _database_url(args)
    processes.check_endpoints("--forbid-address", args.forbid_address)
    # nodus dev's hosts are this machine: Jobs' inputs and sinks may be on its loopback, never on the control
    # plane's own endpoints (its database and API server, ADR 0032).
    args.allow_loopback_endpoints = True
    try:
        registry = _dev_images(args, data_dir)
        if args.default_image is None:
            # What `nodus run` runs without --image: the base image the hosts can pull from the dev registry.
            args.default_image = registry.reference(devregistry.PYTHON) if registry is not None else "python:3.11"
        if not url:
            embedded = database.EmbeddedPostgres(data_dir / "postgres")
            url = embedded.start()
        database.migrate(url)
        client_host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
        files = certificates.ensure_serving(data_dir / "pki", sorted({client_host, "127.0.0.1", "localhost"}))
        token_file = args.token_auth_file or _dev_tokens(data_dir / "tokens.csv")
        server_url = f"https://{client_host}:{args.port}"
        config = data_dir / "kubeconfig"
        kubeconfig.write(config, server_url, files.ca_cert, _admin_token(token_file))
        # The controllers run as themselves, not as the administrator (their own kubeconfig, same directory).
        controllers_config = data_dir / "controllers.kubeconfig"
        controllers_token = _group_token(token_file, CONTROLLERS_GROUP)
        if controllers_token is None:
            log.warning("%s has no %s token: the controllers run as the administrator", token_file, CONTROLLERS_GROUP)
        kubeconfig.write(
            controllers_config,
            server_url,
            files.ca_cert,
            controllers_token or _admin_token(token_file),
            user="nodus-controllers",
        )
        key_file = args.secret_key_file or _dev_secret_keys(data_dir / "secret-keys")
        if not args.blob_store:
            args.blob_store = str(data_dir / "blobs")
        server = APIServer(
            _settings(args, url, token_file, bootstrap_projects=("default",), bootstrap_credits=DEV_CREDITS),
            secret_key_file=key_file,
        )
        listener = Listener(args.host, args.port, files.cert, files.key)
        args.sim_agent_allow_loopback_endpoints = True
        args.sim_agent_forbid_address += [*args.forbid_address, _listening(args), *_database_endpoint(url)]
        controllers = processes.controller_settings(args, controllers_config, data_dir)
        if not args.identity:
            # One identity per data directory: a restarted `nodus dev` renews its own Lease at once
            # instead of waiting for the previous run's (which may have been killed) to expire.
            digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:8]
            controllers.identity = f"nodus-dev-{socket.gethostname()}-{digest}"
        _run(_serve_announced(server, listener, server_url, config, controllers))
    finally:
        if registry is not None and not registry.reused:
            registry.stop()
            log.info("image registry on %s stopped", registry.address)
        if embedded is not None:
            log.info("stopping the embedded database under %s ...", embedded.data_dir)
            if embedded.stop():
                log.info("embedded database stopped")
            else:
                log.info("embedded database left running: another process still uses it")


def _dev_images(args: argparse.Namespace, data_dir: Path) -> devregistry.DevRegistry | None:
    """Choose the simulated hosts' runtime (``auto``: podman when it works here, else bubblewrap) and start the
    dev registry (podman only, unless ``--registry-port 0``); the agents get ``--insecure-registry`` for it and
    for every ``--insecure-registry`` given."""
    problem = devregistry.podman_problem()
    if args.sim_runtime == "auto":
        args.sim_runtime = "podman" if problem is None else "bubblewrap"
        if problem is not None:
            log.warning(
                "podman does not work here (%s): the simulated hosts run programs in bubblewrap on this host's "
                "filesystem, and Jobs' images are recorded, not pulled",
                problem,
            )
    registry = None
    if args.registry_port and problem is None:
        try:
            registry = devregistry.start(data_dir, args.registry_port)
        except devregistry.RegistryError as exc:
            raise SystemExit(f"nodus dev: {exc}") from None
        verb = "reusing the image registry" if registry.reused else "image registry serving"
        log.info("%s on %s: %s", verb, registry.address, ", ".join(map(registry.reference, registry.pushed)))
    elif args.registry_port:
        log.warning("no image registry: it needs podman (%s)", problem)
    own = registry.insecure_registries if registry is not None else ()
    args.sim_agent_insecure_registry = list(
        dict.fromkeys([*args.sim_agent_insecure_registry, *args.insecure_registry, *own])
    )
    return registry


async def _serve_announced(
    server: APIServer, listener: Listener, url: str, config: Path, controllers: ControllerSettings
) -> None:
    """Serve, then run the controllers in the same loop. A stop signal stops the controllers first
    (they release their Lease and take the simulated hosts down while the API still answers), then
    the server."""
    ready = asyncio.Event()
    running: asyncio.Future[None] | None = None

    async def stop_controllers() -> None:
        if running is not None:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(running, 20)

    task = asyncio.ensure_future(serve(server, listener, ready, before_exit=stop_controllers))
    waiter = asyncio.ensure_future(ready.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if ready.is_set():
        running = asyncio.ensure_future(assembly.run(controllers))
        print(f"Nodus is serving on {url}; to use it: export KUBECONFIG={config}", flush=True)
        link = await console.dev_login_link(server, url, config)
        if link is not None:
            print(f"Console: {link}", flush=True)
    await task
    if running is not None and not running.done():
        await stop_controllers()


def apiserver(args: argparse.Namespace) -> None:
    url = _database_url(args)
    if not url:
        raise SystemExit("nodus apiserver needs --database-url or NODUS_DATABASE_URL")
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        raise SystemExit("--tls-cert-file and --tls-private-key-file go together")
    if not args.tls_cert_file and not args.behind_tls_terminator:
        # Every credential is a bearer token (token file, node credentials, bootstrap tokens): over plain HTTP
        # anyone on the path reads and replays it (ADR 0033).
        raise SystemExit(
            "nodus apiserver serves plain HTTP only behind a TLS terminator: without --tls-cert-file, the bearer "
            "tokens clients send would cross the network in clear text. Pass --tls-cert-file and "
            "--tls-private-key-file, or --behind-tls-terminator when a proxy that terminates TLS is the only way "
            "to this port."
        )
    if args.migrate:
        database.migrate(url)
    processes.check_endpoints("--forbid-address", args.forbid_address)
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
    try:
        server = APIServer(settings, secret_key_file=args.secret_key_file)
    except KeyFileError as exc:
        raise SystemExit(f"--secret-key-file: {exc}") from None
    _run(serve(server, listener))


def migrate(args: argparse.Namespace) -> None:
    url = _database_url(args)
    if not url:
        raise SystemExit("nodus migrate needs --database-url or NODUS_DATABASE_URL")
    database.migrate(url)
    print("database schema is up to date")
