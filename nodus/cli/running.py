"""``nodus run`` and ``nodus attach``: submit a Job from a file and flags, show its estimate, create it bound to
that estimate and follow it to the end; attach to one that runs.

Flags only here (this module is imported by every ``nodus`` command); the work is in :func:`run` and
:func:`attach`, which import what they need when they run.
"""

from __future__ import annotations

import argparse
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", help="a Job manifest (YAML or JSON; - for stdin) that the flags amend")
    parser.add_argument("--name", help="the Job's name (default: the file's, else generated from the command)")
    parser.add_argument("-n", "--namespace", "--project", dest="project", help="the project (default: kubeconfig's)")
    parser.add_argument("--image", help="the container image (default: the file's, else the server's default image)")
    parser.add_argument("--gpu", metavar="TYPE:COUNT", help="GPUs, e.g. H100:8, l4:1 or 1 (any type)")
    parser.add_argument("--cpu", help="vCPU floor, e.g. 4 or 500m")
    parser.add_argument("--memory", help="memory floor, e.g. 16Gi")
    parser.add_argument("--completions", type=int, metavar="N", help="indexed completions (index 0..N-1)")
    parser.add_argument(
        "--source",
        metavar="DIR",
        help="upload DIR (its .gitignore respected) as the Job's source, unpacked in the working directory",
    )
    parser.add_argument("-y", "--yes", action="store_true", help="create without asking after the estimate")
    parser.add_argument("-d", "--detach", action="store_true", help="create, print the Job's name and return")
    parser.add_argument(
        "--logs",
        choices=("0", "all", "none"),
        default="0",
        help="whose logs to follow: index 0 (default), every index, or none",
    )
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")
    parser.add_argument(
        "program", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS", help="what the Job runs (after --)"
    )


def add_attach_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="the Job to follow")
    parser.add_argument("-n", "--namespace", "--project", dest="project", help="the project (default: kubeconfig's)")
    parser.add_argument("--logs", choices=("0", "all", "none"), default="0", help="whose logs to follow")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def run(args: argparse.Namespace) -> None:
    """``nodus run``: build the Job, upload its source, show the estimate, confirm, create it bound to the
    estimate (``If-Match``), then follow it. Exit codes: 0 Succeeded (or created with ``--detach``), 1 Failed,
    Cancelled, blocked by the estimate or refused, 2 when confirmation is needed but cannot be asked, 130 on
    Ctrl-C (the Job, once created, keeps running)."""
    import sys

    from nodus.cli import jobbuilding

    manifest = _read_manifest(args) if args.filename else None
    program = list(args.program)
    if program[:1] == ["--"]:
        program = program[1:]
    flags = jobbuilding.Flags(
        name=args.name,
        image=args.image,
        gpu=args.gpu,
        cpu=args.cpu,
        memory=args.memory,
        completions=args.completions,
        command=program,
    )
    if args.source and not Path(args.source).is_dir():
        raise SystemExit(_usage(f"--source {args.source}: not a directory"))
    session = _Session(args, manifest)
    try:
        planned = session.call(session.plan(flags))
    except KeyboardInterrupt:
        print("\nnothing created", file=sys.stderr)
        raise SystemExit(130) from None
    if planned is None:
        raise SystemExit(1)
    job, etag = planned
    name = str(job["metadata"].get("name") or job["metadata"].get("generateName", "") + "...")
    if not args.yes:
        _confirm(f"Create job/{name} in project {session.project}? [y/N] ")
    try:
        created = session.call(session.create(job, etag))
    except KeyboardInterrupt:
        hint = f"`nodus jobs -n {session.project}` shows whether it was created"
        print(f"\nCtrl-C before the server answered: {hint}", file=sys.stderr)
        raise SystemExit(130) from None
    name = str(created["metadata"]["name"])
    print(f"job/{name} created", flush=True)
    if args.detach:
        print(f"follow it: nodus attach {name} -n {session.project}", file=sys.stderr)
        return
    raise SystemExit(session.follow(created, replay=True))


def _read_manifest(args: argparse.Namespace) -> dict[str, Any]:
    """The Job manifest that ``-f`` names (``-``: stdin, which only ``--yes`` allows, since the prompt reads
    stdin too). A file that cannot be read or holds no valid manifest ends the command (exit 1)."""
    import sys

    from nodus.cli import jobbuilding

    if args.filename == "-" and not args.yes:
        raise SystemExit(_usage("the manifest comes from stdin, so nothing can be asked: pass --yes"))
    try:
        text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text(encoding="utf-8")
    except OSError as exc:
        raise SystemExit(_usage(f"{args.filename}: {exc.strerror}")) from None
    try:
        return jobbuilding.load_manifest(text, args.filename)
    except jobbuilding.BuildError as exc:
        raise SystemExit(_usage(str(exc))) from None


def _confirm(question: str) -> None:
    """Ask ``question`` on the terminal; return only when the answer is y or yes. Otherwise the command ends
    with nothing created: exit 2 when stdin is not a terminal (nothing can be asked), 130 on Ctrl-C, 1 on any
    other answer (end of input included)."""
    import sys

    if not sys.stdin.isatty():
        raise SystemExit(_usage("pass --yes to create without asking (stdin is not a terminal)", code=2))
    try:
        answer = input(question)
    except KeyboardInterrupt:
        print("\nnot created", file=sys.stderr)
        raise SystemExit(130) from None
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        print("not created", file=sys.stderr)
        raise SystemExit(1)


def attach(args: argparse.Namespace) -> None:
    """``nodus attach JOB``: follow a Job until it finishes (one that finished already: its summary). Exit
    codes as for ``nodus run``."""
    session = _Session(args, None)
    kind, slash, name = args.job.rpartition("/")
    if slash and kind not in ("job", "jobs", "nj"):
        raise SystemExit(_usage(f"nodus attach follows Jobs: name one as JOB or job/JOB, not {args.job}"))
    try:
        job = session.call(session.get(name))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    raise SystemExit(session.follow(job, replay=False))


def _usage(message: str, code: int = 1) -> int:
    """Print a one-line error of this command; the exit code to end with."""
    import sys

    print(f"nodus: {message}", file=sys.stderr)
    return code


class _Session:
    """One command's client configuration and project, and its steps, each run in its own event loop (the
    confirmation prompt sits between them)."""

    def __init__(self, args: argparse.Namespace, manifest: dict[str, Any] | None) -> None:
        from nodus.cli.processes import kubeconfig_path
        from nodus.client import ClientConfig

        self.args = args
        self.manifest = manifest
        try:
            self.config = ClientConfig.from_kubeconfig(kubeconfig_path(args))
        except (OSError, ValueError, KeyError) as exc:
            raise SystemExit(_usage(f"cannot read the kubeconfig: {exc}")) from None
        named = ((manifest or {}).get("metadata") or {}).get("namespace")
        self.project = str(args.project or named or self.config.namespace or "default")

    def call(self, step: Coroutine[Any, Any, T]) -> T:
        """Run one step; a refusal from the server or an unreachable server ends the command (exit 1)."""
        import asyncio

        import httpx

        from nodus.client import errors

        try:
            return asyncio.run(step)
        except errors.APIError as exc:
            raise SystemExit(_server_error(exc)) from None
        except httpx.TransportError as exc:
            raise SystemExit(_usage(f"cannot reach the API server at {self.config.server}: {exc}")) from None

    def client(self, timeout: float = 30.0) -> Any:
        from nodus.client import Client

        return Client(self.config, user_agent="nodus-cli", timeout=timeout)

    async def get(self, name: str) -> dict[str, Any]:
        async with self.client() as client:
            return dict(await client.get("jobs", name, self.project))

    async def plan(self, flags: Any) -> tuple[dict[str, Any], str | None] | None:
        """The Job to create and the ETag of its estimate, after printing the estimate; None when the
        estimate has blocking reasons (printed with their fixes) or the Job cannot be built."""
        import sys

        from nodus.cli import estimate, jobbuilding, sourceupload
        from nodus.cli.followoutput import size_text
        from nodus.client import rest

        async with self.client(timeout=300.0) as client:
            offered = await _offered_families(client, flags.gpu)
            try:
                job = jobbuilding.build(self.manifest, flags, offered=offered)
                if not job["spec"].get("image"):
                    info = (await client.request("GET", "/serverinfo")).json()
                    jobbuilding.with_default_image(job, str(info.get("defaultImage") or ""))
            except jobbuilding.BuildError as exc:
                _usage(str(exc))
                return None
            job["metadata"]["namespace"] = self.project
            if self.args.source:
                try:
                    packed, blob = await sourceupload.upload(client, self.project, Path(self.args.source))
                except sourceupload.SourceError as exc:
                    _usage(str(exc))
                    return None
                job["spec"]["source"] = {"blob": blob["digest"]}
                print(
                    f"source: {packed.files} files ({packed.ignored} ignored by .gitignore), "
                    f"{size_text(packed.size)} uploaded as {blob['digest']}",
                    file=sys.stderr,
                )
            path = rest.path("jobs", self.project)  # quoted: a hostile -n names no other path
            answered = await client.request("POST", path, params={"dryRun": "All"}, json=job)
        figures = dict((answered.json().get("status") or {}).get("estimate") or {})
        if isinstance(figures.get("placementPreview"), dict):
            # why this placement, offering by offering, is `nodus estimate`'s business: here it would bury the rest
            figures["placementPreview"] = {k: v for k, v in figures["placementPreview"].items() if k != "explain"}
        name = str(job["metadata"].get("name") or "(generated)")
        expected = job["spec"].get("expectedDuration")
        print(estimate.render(name, self.project, figures, str(expected) if expected else None), flush=True)
        if figures.get("blockingReasons"):
            print(f"job/{name} not created: the estimate is blocked (see BLOCKED above for each fix)", file=sys.stderr)
            return None
        return job, answered.headers.get("etag")

    async def create(self, job: dict[str, Any], etag: str | None) -> dict[str, Any]:
        from nodus.client import rest

        async with self.client() as client:
            path = rest.path("jobs", self.project)
            headers = {"If-Match": etag} if etag else {}
            return dict((await client.request("POST", path, json=job, headers=headers)).json())

    def follow(self, job: dict[str, Any], *, replay: bool) -> int:
        """Follow ``job`` to its end and print the summary; the exit code (130 after Ctrl-C, with the hints)."""
        import sys

        from nodus.apis.v1.phases import JOB_FINISHED
        from nodus.cli import following, followoutput

        name = str(job["metadata"]["name"])
        output = followoutput.output_for()
        phase = (job.get("status") or {}).get("phase")
        try:
            final = job if phase in JOB_FINISHED else self.call(self._follow(job, output, replay))
        except KeyboardInterrupt:
            output.close()
            print(
                f"\ndetached: job/{name} keeps running\n"
                f"  re-attach: nodus attach {name} -n {self.project}\n"
                f"  cancel:    nodus cancel {name} -n {self.project}",
                file=sys.stderr,
                flush=True,
            )
            return 130
        except following.JobDeleted as exc:
            output.close()
            return _usage(str(exc))
        output.close()
        lines, code = followoutput.summary(final, self.project)
        for text, style in lines:
            output.line(text, style)
        return code

    async def _follow(self, job: dict[str, Any], output: Any, replay: bool) -> dict[str, Any]:
        from nodus.cli import following

        async with self.client() as client:
            name = str(job["metadata"]["name"])
            follower = following.Follower(client, self.project, name, output, logs=self.args.logs, replay=replay)
            return await follower.run(job)


async def _offered_families(client: Any, gpu: str | None) -> list[str]:
    """For a bare ``--gpu COUNT``: the GPU families offered with at least COUNT GPUs per host, cheapest per GPU
    first (nothing is asked for any other ``--gpu``)."""
    from decimal import Decimal

    from nodus.apis.v1 import objects

    if gpu is None or ":" in gpu or not gpu.strip().isdigit():
        return []
    count = int(gpu)
    priced: list[tuple[Decimal, str]] = []
    for item in (await client.list("offerings")).get("items") or []:
        spec = objects.read(objects.Offering, item).spec
        if spec.gpus >= count and spec.family:
            priced.append((Decimal(str(spec.rate_usd_per_hour)) / spec.gpus, spec.family))
    return list(dict.fromkeys(family for _, family in sorted(priced)))


def _server_error(exc: Any) -> int:
    """Print an API refusal as kubectl does, with each field's cause and the server's fix; the exit code."""
    import sys

    lines = [f"Error from server ({exc.reason}): {exc.message}"]
    lines += [f"  {c.get('field') or '-'}: {c.get('message')}" for c in exc.causes if c.get("message")]
    fix = exc.body.get("fix")
    if fix:
        lines.append(f"fix: {fix}")
    print("\n".join(lines), file=sys.stderr)
    return 1
