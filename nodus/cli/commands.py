"""Client commands: ``nodus logs`` and ``nodus sim``. Like kubectl, they only talk to the API."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from nodus.apimachinery import units
from nodus.cli.processes import duration, kubeconfig_path

SIM_ACTIONS = ("preempt", "kill", "fail-boot")


def add_logs_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="job/NAME or attempt/NAME")
    parser.add_argument("-n", "--namespace", "--project", dest="project", default="default", help="the project")
    parser.add_argument("-f", "--follow", action="store_true", help="stream new lines until the attempt ends")
    parser.add_argument("--index", type=int, help="the Job index (default 0)")
    parser.add_argument("--attempt", type=int, help="the attempt number within the index (default the latest)")
    parser.add_argument("--rank", type=int, help="a gang's rank (default 0); --attempt is then the epoch")
    parser.add_argument("--tail", type=int, help="only the last N lines")
    parser.add_argument("--since", type=duration, help="only lines newer than this, e.g. 5m")
    parser.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def logs(args: argparse.Namespace) -> None:
    from nodus.client import Client, ClientConfig, errors

    kind, _, name = args.target.partition("/")
    plural = {"job": "jobs", "jobs": "jobs", "nj": "jobs", "attempt": "attempts", "attempts": "attempts"}.get(kind)
    if plural is None or not name:
        raise SystemExit("nodus logs: name job/NAME or attempt/NAME")
    params = _log_params(args, plural)
    path = f"/apis/nodus.dev/v1/namespaces/{args.project}/{plural}/{name}/log"
    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))

    async def main() -> None:
        async with Client(config, user_agent="nodus-cli", timeout=3600.0 * 24 if args.follow else 30.0) as client:
            waiting = False
            while True:
                try:
                    async for line in client.stream_lines(path, params):
                        sys.stdout.write(line + "\n")
                        sys.stdout.flush()
                    return
                except errors.APIError as exc:
                    retry = _retry_after(exc) if args.follow else None
                    if retry is None:
                        raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None
                if not waiting:
                    print(f"waiting for {_awaited(args)}", file=sys.stderr, flush=True)
                    waiting = True
                await asyncio.sleep(retry)

    with contextlib.suppress(KeyboardInterrupt):
        try:
            asyncio.run(main())
        except BrokenPipeError:
            # The reader went away (`nodus logs ... | head`): stop quietly, as cat does.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(1) from None


def _log_params(args: argparse.Namespace, plural: str) -> dict[str, Any]:
    """The query of the log request for ``nodus logs``' flags: only the flags given, under the API's names.
    ``--index``, ``--attempt`` and ``--rank`` choose among a Job's attempts, so they count only when
    ``plural`` is ``jobs`` (an attempt names itself)."""
    params: dict[str, Any] = {}
    if args.follow:
        params["follow"] = "true"
    if args.tail is not None:
        params["tailLines"] = args.tail
    if args.since is not None:
        params["sinceSeconds"] = max(int(args.since.total_seconds()), 1)
    if args.timestamps:
        params["timestamps"] = "true"
    if plural == "jobs":
        if args.index is not None:
            params["index"] = args.index
        if args.attempt is not None:
            params["attempt"] = args.attempt
        if args.rank is not None:
            params["rank"] = args.rank
    return params


def _retry_after(exc: Exception) -> float | None:
    """The wait a ``NotFound`` Status asks for in ``details.retryAfterSeconds``: the server's word that the
    attempt asked for may still start (the Job has not finished). None: it never will, or another error."""
    from nodus.client import errors

    if not isinstance(exc, errors.NotFound):
        return None
    details = exc.body.get("details")
    seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return min(max(float(seconds), 0.2), 10.0) if isinstance(seconds, int | float) else None


def _awaited(args: argparse.Namespace) -> str:
    """What a followed log waits for, in the words of ``nodus logs``' flags."""
    index = args.index or 0
    rank = f" rank {args.rank}" if args.rank else ""
    if args.attempt is not None:
        return f"attempt {args.attempt} of index {index}{rank}"
    return f"index {index}{rank}'s first attempt"


def add_sim_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=SIM_ACTIONS, help="the fault to inject")
    parser.add_argument("node", help="the Node (kubectl get nodes.nodus.dev)")
    parser.add_argument("--notice", type=duration, help="preempt: how long before the host goes away (default 30s)")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def sim(args: argparse.Namespace) -> None:
    """Ask the simulated cloud for a fault by annotating the Node, as any requested action is asked."""
    from nodus.client import Client, ClientConfig, errors

    annotations = {f"sim.nodus.dev/{args.action}-requested-at": units.format_micro_time(units.now())}
    if args.action == "preempt" and args.notice is not None:
        annotations["sim.nodus.dev/preempt-notice"] = f"{int(args.notice.total_seconds())}s"
    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))

    async def main() -> None:
        async with Client(config, user_agent="nodus-cli") as client:
            try:
                await client.patch("nodes", args.node, {"metadata": {"annotations": annotations}})
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None

    asyncio.run(main())
    print(f"node/{args.node} {args.action} requested")


# --- outputs and volumes -----------------------------------------------------------------------

TRANSFER_CHUNK = 1024 * 1024
TAR_ZSTD = "application/vnd.nodus.tar+zstd"


def _project(args: argparse.Namespace, config: Any) -> str:
    return str(args.project or config.namespace or "default")


def add_outputs_get_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="the Job's name")
    parser.add_argument("output", help="the output's name (spec.outputs[].name)")
    parser.add_argument("--index", type=int, default=0, help="the Job index that produced it (default 0)")
    parser.add_argument(
        "--rank", type=int, help="the gang rank that produced it (default: every rank's, each under rank-<n>/)"
    )
    parser.add_argument("-n", "--namespace", "--project", dest="project", help="the project (default: kubeconfig's)")
    parser.add_argument(
        "-o",
        "--output-file",
        dest="file",
        help="where to write it; - for stdout (default: its name); for every rank's, the directory to put rank-<n>/ in",
    )
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def attachment_name(disposition: str) -> str | None:
    """The file name of a ``Content-Disposition: attachment`` header, reduced to a safe base name."""
    import email.message
    import os.path

    message = email.message.Message()
    message["content-disposition"] = disposition
    name = message.get_filename()
    if not name:
        return None
    name = os.path.basename(name.replace("\\", "/"))
    return None if name in ("", ".", "..") else name


def outputs_get(args: argparse.Namespace) -> None:
    """Download a committed output of a Job to a file (the server's file name unless -o says otherwise). An output
    a gang collected from every rank (``fromRanks: All``) is downloaded rank by rank into ``rank-<n>/`` (under
    the directory -o names, if any) unless ``--rank`` picks one (ADR 0046 §7)."""
    from nodus.client import Client, ClientConfig, errors

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))
    project = _project(args, config)
    url = f"/apis/nodus.dev/v1/namespaces/{project}/jobs/{args.job}/outputs/{args.output}"

    async def main() -> list[tuple[int | None, str]]:
        async with Client(config, user_agent="nodus-cli", timeout=300.0) as client:
            try:
                ranks = [args.rank] if args.rank is not None else await _ranks_of(client, project, args)
                if len(ranks) <= 1 or args.file == "-":
                    rank = ranks[0] if ranks else None
                    params = {"index": args.index, **({"rank": rank} if rank is not None else {})}
                    return [(rank, await _download(client, url, params, args.file, args.output))]
                base = Path(args.file or ".")
                written = []
                for rank in ranks:
                    (base / f"rank-{rank}").mkdir(parents=True, exist_ok=True)
                    params = {"index": args.index, "rank": rank}
                    target = await _download(client, url, params, None, args.output, base / f"rank-{rank}")
                    written.append((rank, target))
                return written
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None

    for rank, written in asyncio.run(main()):
        if written != "-":
            of = f"rank {rank}" if rank is not None else f"index {args.index}"
            print(f"job/{args.job} output {args.output} ({of}) written to {written}", file=sys.stderr)


async def _ranks_of(client: Any, project: str, args: argparse.Namespace) -> list[int | None]:
    """The gang ranks that committed the output at the index (``[None]`` for an output without ranks)."""
    job = await client.get("jobs", args.job, project)
    entries = [
        o
        for o in (job.get("status") or {}).get("outputs") or []
        if o.get("name") == args.output and int(o.get("index") or 0) == args.index
    ]
    ranks = sorted({int(o["rank"]) for o in entries if o.get("rank") is not None})
    return list(ranks) if ranks else [None]


async def _download(
    client: Any, url: str, params: dict[str, Any], file: str | None, default: str, directory: Path | None = None
) -> str:
    """Stream one output to ``file`` (``-``: stdout), else to the server's file name in ``directory``."""
    import os

    async with client.open_download(url, params) as response:
        if file == "-":
            async for chunk in response.aiter_bytes(TRANSFER_CHUNK):
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            return "-"
        name = file or attachment_name(response.headers.get("content-disposition", "")) or default
        target = (directory / name) if directory is not None else Path(name)
        partial = target.with_name(target.name + ".part")
        try:
            with partial.open("wb") as handle:
                async for chunk in response.aiter_bytes(TRANSFER_CHUNK):
                    handle.write(chunk)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return str(target)


def add_volumes_upload_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("volume", help="the Volume's name")
    parser.add_argument("path", help="a directory (sent as tar.zst) or a file (sent as itself)")
    parser.add_argument("-n", "--namespace", "--project", dest="project", help="the project (default: kubeconfig's)")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


async def tar_zst_chunks(directory: Path) -> AsyncIterator[bytes]:
    """The directory's tree as a zstd-compressed tar, produced in a thread and read as it is made
    (through a pipe: the producer waits while the upload is slower, so memory stays bounded)."""
    import os
    import tarfile

    import zstandard

    read_fd, write_fd = os.pipe()

    def produce() -> None:
        with os.fdopen(write_fd, "wb") as raw:
            compressor = zstandard.ZstdCompressor(level=3)
            with (
                compressor.stream_writer(raw, closefd=False) as compressed,
                tarfile.open(fileobj=compressed, mode="w|", format=tarfile.PAX_FORMAT) as tar,
            ):
                for child in sorted(directory.iterdir()):
                    tar.add(child, arcname=child.name)

    producing = asyncio.ensure_future(asyncio.to_thread(produce))
    reader = os.fdopen(read_fd, "rb", buffering=0)
    try:
        while data := await asyncio.to_thread(reader.read, TRANSFER_CHUNK):
            yield data
    finally:
        reader.close()  # a producer still writing gets BrokenPipeError and stops
        with contextlib.suppress(BrokenPipeError):
            await producing


async def file_chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as handle:
        while data := await asyncio.to_thread(handle.read, TRANSFER_CHUNK):
            yield data


def file_media_type(name: str) -> tuple[str, str | None]:
    """How a file is sent: a ``.tar`` or ``.tar.zst`` as the tree it holds (no file name), anything
    else as one file with its guessed type and its name."""
    import mimetypes

    lowered = name.lower()
    if lowered.endswith((".tar.zst", ".tzst")):
        return TAR_ZSTD, None
    if lowered.endswith(".tar"):
        return "application/x-tar", None
    guessed, encoding = mimetypes.guess_type(name)
    if guessed is None or encoding is not None or guessed == "application/x-tar":
        guessed = "application/octet-stream"
    return guessed, name


def volumes_upload(args: argparse.Namespace) -> None:
    """Add a revision to a Volume: a directory as tar.zst, a file as itself (checked by its digest)."""
    import hashlib

    from nodus.client import Client, ClientConfig, errors

    source = Path(args.path)
    if not source.exists():
        raise SystemExit(f"nodus volumes upload: {source}: no such file or directory")
    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))
    project = _project(args, config)
    is_dir = source.is_dir()

    async def main() -> dict[str, Any]:
        async with Client(config, user_agent="nodus-cli", timeout=300.0) as client:
            try:
                if is_dir:
                    return await client.upload_volume_revision(project, args.volume, tar_zst_chunks(source), TAR_ZSTD)
                hasher = hashlib.sha256()
                async for chunk in file_chunks(source):
                    hasher.update(chunk)
                media, filename = file_media_type(source.name)
                return await client.upload_volume_revision(
                    project,
                    args.volume,
                    file_chunks(source),
                    media,
                    filename=filename,
                    digest="sha256:" + hasher.hexdigest(),
                )
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None

    result = asyncio.run(main())
    revision = result.get("revision") or {}
    print(
        f"volume/{args.volume} revision {revision.get('revision')} uploaded: "
        f"sha256:{revision.get('sha256')} ({revision.get('size')} bytes, {revision.get('mediaType')})"
    )
