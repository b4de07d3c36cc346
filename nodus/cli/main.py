"""``nodus``: the command line entry point.

Each command's implementation is imported only when it runs, so that ``nodus agent`` (started once
per simulated host) and the client commands start without loading the API server.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from datetime import timedelta
from pathlib import Path
from types import FrameType

from nodus.apimachinery.units import parse_quantity
from nodus.cli import (
    agentprocess,
    billing,
    commands,
    console,
    draining,
    estimate,
    fakehosts,
    jobcommands,
    keys,
    nodes,
    pools,
    processes,
    running,
    workspaces,
)
from nodus.cli.processes import duration as _duration


def _seconds(text: str) -> timedelta:
    """A whole number of seconds (kube-apiserver's form of --min-request-timeout) or a duration."""
    return timedelta(seconds=int(text)) if text.isdigit() else _duration(text)


def _add_server_flags(parser: argparse.ArgumentParser, funded_window: bool = True) -> None:
    """The API server's flags; ``funded_window`` False where the controllers' flag of that name is added
    too (nodus dev), which then serves both."""
    if funded_window:
        parser.add_argument(
            "--funded-window",
            type=_duration,
            default=timedelta(minutes=10),
            help="the funded window the billing controllers hold for (their --funded-window): estimates quote "
            "holds with it (default 10m)",
        )
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
    parser.add_argument(
        "--min-request-timeout",
        type=_seconds,
        default=timedelta(minutes=30),
        metavar="DURATION",
        help="as kube-apiserver's: a watch without timeoutSeconds lasts between this and twice this, and no watch "
        "lasts longer than twice this (seconds, or a duration such as 30m; default 30m)",
    )
    parser.add_argument(
        "--max-watches-per-user",
        type=int,
        default=100,
        metavar="N",
        help="watches one user may hold open on this process; the next gets 429 (0: no cap; administrators are "
        "exempt; default 100)",
    )
    parser.add_argument(
        "--max-log-follows-per-user",
        type=int,
        default=20,
        metavar="N",
        help="logs one user may follow at once on this process; the next gets 429 (0: no cap; administrators are "
        "exempt; default 20)",
    )
    parser.add_argument("--external-url", default="", help="base URL of the docs links in error responses")
    parser.add_argument(
        "--default-image",
        metavar="IMAGE",
        help="the image nodus run gives a Job that names none, announced at GET /serverinfo (default: none; "
        "nodus dev: its registry's python image, else python:3.11)",
    )
    parser.add_argument(
        "--secret-key-file",
        type=Path,
        metavar="FILE",
        help="keys that seal Secret values, one '<key id> <base64 of 32 bytes>' per line; the last seals "
        "(nodus dev: <data dir>/secret-keys, created on first start)",
    )
    parser.add_argument(
        "--blob-store",
        metavar="URL",
        help="where the bytes of blobs, outputs and Volume revisions go: file:///a/directory (or a path), or "
        "s3://bucket/prefix?endpoint=URL&region=R with AWS credentials from the environment "
        "(nodus dev: <data dir>/blobs; without it those endpoints answer 503)",
    )
    parser.add_argument(
        "--max-blob-size",
        type=_bytes,
        default=64 * 2**30,
        metavar="QUANTITY",
        help="the largest blob, output, Volume revision or checkpoint chunk an upload may store (default 64Gi)",
    )
    parser.add_argument(
        "--project-storage-quota",
        type=_bytes,
        default=2**40,
        metavar="QUANTITY",
        help="the bytes of blobs one project may store, each digest once (default 1Ti)",
    )
    parser.add_argument(
        "--blob-grace-period",
        type=_duration,
        default=timedelta(hours=24),
        help="how long a blob nothing names is kept before it is deleted; longer than any upload takes (default 24h)",
    )
    parser.add_argument(
        "--blob-collection-interval",
        type=_duration,
        default=timedelta(minutes=1),
        help="how often unreferenced blobs are collected and projects' storage hours charged (default 1m)",
    )
    if funded_window:  # nodus dev: the controllers' flag of that name serves both
        parser.add_argument(
            "--storage-charge-interval",
            type=_duration,
            default=timedelta(hours=1),
            help="how long one billed hour of a project's stored bytes lasts; for tests only (default 1h, "
            "billed as an hour always)",
        )
    parser.add_argument(
        "--price-book",
        type=Path,
        metavar="FILE",
        help="the price book the stored Offerings are made equal to at start: a file, or sim or aws for the ones "
        "shipped with Nodus (default: sim, the simulated cloud's)",
    )
    parser.add_argument(
        "--allow-loopback-endpoints",
        action="store_true",
        help="accept Jobs and Connections naming this host's loopback (tests; nodus dev always does); the server's "
        "own and --forbid-address endpoints stay refused",
    )
    parser.add_argument(
        "--forbid-address",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="an endpoint Jobs and Connections may never name (repeatable); the server's database and listening "
        "address always are",
    )


def _bytes(text: str) -> int:
    """A positive whole number of bytes, written as a quantity (``64Gi``, ``1Ti``, ``500``)."""
    try:
        value = parse_quantity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value < 1 or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number of bytes")
    return int(value)


def _registry_host(text: str) -> str:
    """A registry as image references name it, ``HOST[:PORT]``: no scheme, path, credentials or spaces."""
    host, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if not host or any(c in text for c in "/@?# \t\r\n") or (port and not (port.isdigit() and 0 < int(port) < 65536)):
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (no scheme, path or credentials)")
    return text.lower()


def _terminate(signum: int, _: FrameType | None) -> None:
    raise SystemExit(0)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="nodus", description="Nodus: a control plane for GPU batch work.")
    root.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands_ = root.add_subparsers(dest="command", required=True)

    dev_cmd = commands_.add_parser("dev", help="run the whole system locally (embedded PostgreSQL, TLS, kubeconfig)")
    dev_cmd.add_argument("--host", default="127.0.0.1")
    dev_cmd.add_argument("--port", type=int, default=8080)
    dev_cmd.add_argument("--data-dir", default=".nodus", help="where the database, certificates and kubeconfig live")
    dev_cmd.add_argument(
        "--registry-port",
        type=int,
        default=5000,
        metavar="PORT",
        help="the port of the image registry on 127.0.0.1 that serves localhost:PORT/nodus/python:3.11 to the "
        "simulated hosts (storage under <data dir>/registry; 0: no registry; default 5000)",
    )
    dev_cmd.add_argument(
        "--insecure-registry",
        action="append",
        default=[],
        type=_registry_host,
        metavar="HOST:PORT",
        help="a registry the simulated hosts pull from over plain HTTP (repeatable, as Docker's "
        "insecure-registries); the dev registry's own address always is",
    )
    _add_server_flags(dev_cmd, funded_window=False)
    processes.add_controller_flags(dev_cmd, with_kubeconfig=False)
    dev_cmd.set_defaults(run="servers:dev")

    api = commands_.add_parser("apiserver", help="serve the nodus.dev/v1 API")
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
    api.add_argument(
        "--behind-tls-terminator",
        action="store_true",
        help="serve plain HTTP without --tls-cert-file: only when a proxy that terminates TLS is the only way to "
        "this port (bearer tokens would otherwise cross the network in clear text; refused without this flag)",
    )
    api.add_argument("--migrate", action="store_true", help="run database migrations before serving")
    _add_server_flags(api)
    api.set_defaults(run="servers:apiserver")

    mig = commands_.add_parser("migrate", help="bring the database schema up to date")
    mig.add_argument("--database-url", help="PostgreSQL URL (default: $NODUS_DATABASE_URL)")
    mig.set_defaults(run="servers:migrate")

    ctl = commands_.add_parser("controllers", help="run the controllers (one leader at a time) and the simulated cloud")
    processes.add_controller_flags(ctl)
    ctl.add_argument(
        "--price-book",
        type=Path,
        metavar="FILE",
        help="the API servers' price book (a file, or sim or aws), whose platformFee prices attempts on Pool hosts "
        "(default: sim, the one shipped with Nodus)",
    )
    ctl.set_defaults(run="processes:controllers")

    agent = commands_.add_parser("agent", help="run a node agent: register a Node and run the Attempts bound to it")
    agentprocess.add_agent_flags(agent)
    agent.set_defaults(run="agentprocess:agent")

    fake = commands_.add_parser(
        "fakehosts", help="play every host of the fake cloud (--provider fake) in one process (ADR 0059)"
    )
    fakehosts.add_flags(fake)
    fake.set_defaults(run="fakehosts:run")

    secrets_cmd = commands_.add_parser("secrets", help="operators' tools on Secret values (reads the database)")
    secrets_commands = secrets_cmd.add_subparsers(dest="secrets_command", required=True)
    reseal = secrets_commands.add_parser("reseal", help="seal every Secret version again under the active key")
    keys.add_reseal_flags(reseal)
    reseal.set_defaults(run="keys:reseal")

    nodes_cmd = commands_.add_parser("nodes", help="hosts: create a join token for one (administrators)")
    nodes_commands = nodes_cmd.add_subparsers(dest="nodes_command", required=True)
    join = nodes_commands.add_parser("join-token", help="print a bootstrap token a host joins with")
    nodes.add_join_token_flags(join)
    join.set_defaults(run="nodes:join_token")

    pools_cmd = commands_.add_parser("pools", help="a project's Pools of hosts: join tokens, drain (its Owners)")
    pool_commands = pools_cmd.add_subparsers(dest="pools_command", required=True)
    pools.add_pool_commands(pool_commands)
    draining.add_drain_commands(pool_commands)

    logs = commands_.add_parser("logs", help="print the logs of a Job's attempt (like kubectl logs)")
    commands.add_logs_flags(logs)
    logs.set_defaults(run="commands:logs")

    sim = commands_.add_parser("sim", help="inject a fault into the simulated cloud: preempt, kill or fail-boot a node")
    commands.add_sim_flags(sim)
    sim.set_defaults(run="commands:sim")

    outputs = commands_.add_parser("outputs", help="download the committed outputs of Jobs")
    outputs_commands = outputs.add_subparsers(dest="outputs_command", required=True)
    outputs_get = outputs_commands.add_parser("get", help="download one output of a Job to a file")
    commands.add_outputs_get_flags(outputs_get)
    outputs_get.set_defaults(run="commands:outputs_get")

    credit = commands_.add_parser("credits", help="a project's prepaid credit: show it, grant it (administrators)")
    credit_commands = credit.add_subparsers(dest="credits_command", required=True)
    grant = credit_commands.add_parser("grant", help="grant credit to a project")
    show = credit_commands.add_parser("show", help="a project's balance, held and available credit")
    billing.add_credits_flags(grant, show)
    grant.set_defaults(run="billing:credits_grant")
    show.set_defaults(run="billing:credits_show")

    estimate_cmd = commands_.add_parser("estimate", help="what a Job will cost before it runs (a dry run), as a table")
    estimate.add_estimate_flags(estimate_cmd)
    estimate_cmd.set_defaults(run="estimate:estimate")

    bill = commands_.add_parser("billing", help="the ledger: verify it, list a statement (administrators, operators)")
    bill_commands = bill.add_subparsers(dest="billing_command", required=True)
    verify = bill_commands.add_parser("verify", help="check every ledger invariant; exit 1 on any breach")
    statement = bill_commands.add_parser("statement", help="every movement and charge of a project, or CSV")
    billing.add_billing_flags(verify, statement)
    verify.set_defaults(run="billing:verify")
    statement.set_defaults(run="billing:statement")

    volumes = commands_.add_parser("volumes", help="add revisions to Volumes")
    volumes_commands = volumes.add_subparsers(dest="volumes_command", required=True)
    volumes_upload = volumes_commands.add_parser("upload", help="upload a directory (as tar.zst) or a file")
    commands.add_volumes_upload_flags(volumes_upload)
    volumes_upload.set_defaults(run="commands:volumes_upload")

    workspaces_cmd = commands_.add_parser("workspaces", help="push a directory to a Workspace, pull a revision")
    workspaces_commands = workspaces_cmd.add_subparsers(dest="workspaces_command", required=True)
    workspaces.add_workspace_commands(workspaces_commands)

    run_cmd = commands_.add_parser("run", help="run a Job: estimate, confirm, create and follow it to the end")
    running.add_run_flags(run_cmd)
    run_cmd.set_defaults(run="running:run")
    attach_cmd = commands_.add_parser("attach", help="follow a Job: phases, progress, logs, events, final cost")
    running.add_attach_flags(attach_cmd)
    attach_cmd.set_defaults(run="running:attach")
    jobs_cmd = commands_.add_parser("jobs", help="list Jobs: phase, completions, cost so far, age")
    jobcommands.add_jobs_flags(jobs_cmd)
    jobs_cmd.set_defaults(run="jobcommands:jobs")
    describe_cmd = commands_.add_parser("describe", help="a Job in full: spec, status, attempts, checkpoint, cost")
    jobcommands.add_describe_flags(describe_cmd)
    describe_cmd.set_defaults(run="jobcommands:describe")
    for verb, what in (("cancel", "stop Jobs for good"), ("suspend", "pause Jobs"), ("resume", "resume Jobs")):
        state_cmd = commands_.add_parser(verb, help=what)
        jobcommands.add_state_flags(state_cmd)
        state_cmd.set_defaults(run=f"jobcommands:{verb}")
    completion_cmd = commands_.add_parser("completion", help="print a shell completion script (bash or zsh)")
    jobcommands.add_completion_flags(completion_cmd)
    completion_cmd.set_defaults(run="jobcommands:completion")
    console_cmd = commands_.add_parser("console", help="print a one-time link that logs you in to the web console")
    console.add_console_flags(console_cmd)
    console_cmd.set_defaults(run="console:console")
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("alembic", "pgserver", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    module_name, _, function = str(args.run).partition(":")
    module = importlib.import_module(f"nodus.cli.{module_name}")
    if module_name == "servers":
        # The servers stop by unwinding (uvicorn and the embedded database clean up on SystemExit);
        # the API clients install their own handlers on their event loops.
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGINT, _terminate)
    try:
        getattr(module, function)(args)
    except ValueError as error:  # a bad price book, kubeconfig or flag value found late
        if type(error).__name__ in ("PriceBookError", "KubeconfigError"):
            raise SystemExit(f"nodus: {error}") from None
        raise


if __name__ == "__main__":
    main()
