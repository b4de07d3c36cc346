"""``nodus jobs``, ``nodus describe``, ``nodus cancel|suspend|resume`` and ``nodus completion``: a person's view
of Jobs without kubectl.

This module is imported by every ``nodus`` command (``nodus agent`` must start fast), so the flags are here and
the work is in the command functions, which import the client, rich and the renderings when they run.

``cancel``, ``suspend`` and ``resume`` send the JSON merge patch ``{"spec": {"state": ...}}`` that a console
or ``kubectl patch`` sends: the server decides what is allowed (a finished Job keeps its state, a Cancelled Job
stays Cancelled, a Viewer may not) and its refusal is printed as kubectl prints one, with the server's fix. A
Job already in the asked state is reported unchanged and not patched. Each Job named is tried; the exit code
is 1 if any was refused.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import TYPE_CHECKING, Any

from nodus.cli.processes import kubeconfig_path

if TYPE_CHECKING:
    from nodus.client import APIError, ClientConfig


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", "--project", dest="project", help="the project (default: kubeconfig's)")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def add_jobs_flags(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("-A", "--all-projects", action="store_true", help="the Jobs of every project you can read")
    parser.add_argument("-l", "--selector", help="a label selector, as kubectl's")
    # For the completion scripts (which discard stderr): the names alone, one a line.
    parser.add_argument("--names-only", action="store_true", help=argparse.SUPPRESS)


def add_describe_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="the Job")
    _common(parser)


def add_state_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jobs", nargs="+", metavar="JOB", help="the Jobs")
    _common(parser)


def add_completion_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash", "zsh"), help="print the completion script for this shell")


def jobs(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime

    from nodus.apis.v1 import objects
    from nodus.cli import jobtables
    from nodus.client import APIError, Client

    config = _config(args)
    project = None if args.all_projects else _project(args, config)

    async def main() -> dict[str, Any]:
        async with Client(config, user_agent="nodus-cli") as client:
            return await client.list("jobs", project, label_selector=args.selector)

    try:
        listed = _run(main(), config)
    except APIError as exc:
        raise SystemExit(1 if args.names_only else _refusal(exc)) from None
    items = list(listed.get("items") or [])
    if args.names_only:
        print("\n".join(sorted(objects.read(objects.Job, item).metadata.name for item in items)))
        return
    if not items:
        where = "any project you can read" if project is None else f"project {project}"
        print(f"No Jobs found in {where}.", file=sys.stderr)
        return
    _show([jobtables.jobs_grid(items, datetime.now(UTC), all_projects=project is None)])


def describe(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime

    from nodus.apis.v1 import labels
    from nodus.cli import describing
    from nodus.client import APIError, Client

    name = _job_name(args.job)
    config = _config(args)
    project = _project(args, config)

    async def main() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with Client(config, user_agent="nodus-cli") as client:
            job = await client.get("jobs", name, project)
            attempts = await client.list("attempts", project, label_selector=f"{labels.JOB}={name}")
            return job, list(attempts.get("items") or [])

    try:
        job, attempts = _run(main(), config)
    except APIError as exc:
        raise SystemExit(_refusal(exc)) from None
    _show(describing.describe(job, attempts, datetime.now(UTC)))


# verb -> the spec.state it asks for, the past participle it prints.
_STATES: dict[str, tuple[str, str]] = {
    "cancel": ("Cancelled", "cancelled"),
    "suspend": ("Suspended", "suspended"),
    "resume": ("Running", "resumed"),
}


def cancel(args: argparse.Namespace) -> None:
    _set_state(args, "cancel")


def suspend(args: argparse.Namespace) -> None:
    _set_state(args, "suspend")


def resume(args: argparse.Namespace) -> None:
    _set_state(args, "resume")


def _set_state(args: argparse.Namespace, verb: str) -> None:
    from nodus.apis.v1 import objects
    from nodus.client import APIError, Client

    state, done = _STATES[verb]
    names = list(dict.fromkeys(_job_name(name) for name in args.jobs))  # each once, in the order given
    config = _config(args)
    project = _project(args, config)

    async def main() -> bool:
        refused = False
        async with Client(config, user_agent="nodus-cli") as client:
            for name in names:
                try:
                    job = objects.read(objects.Job, await client.get("jobs", name, project))
                    if job.spec.state == state:
                        phase = job.status.phase or "not yet admitted"
                        print(f"job/{name} unchanged: its state is already {state} (phase {phase})")
                        continue
                    await client.patch("jobs", name, {"spec": {"state": state}}, project)
                    print(f"job/{name} {done}")
                except APIError as exc:
                    print(_refusal(exc), file=sys.stderr)
                    refused = True
        return refused

    if _run(main(), config):
        raise SystemExit(1)


# The arguments that name Jobs, by command; ``nodus logs`` takes ``job/NAME``.
_JOB_ARGUMENTS = {"describe": "job", "cancel": "jobs", "suspend": "jobs", "resume": "jobs", "attach": "job"}
_JOB_TARGETS = {"logs": "target"}

# Completion of Job names asks the server (``nodus jobs --names-only``) for the project named on the command line
# (-n, --namespace, --project; in bash also as one word with '=': zsh's option specs from shtab take the value only
# as the next word), else the kubeconfig's; it completes nothing when the server cannot be reached.
_BASH_PREAMBLE = r"""
_nodus_project_args() {
  local i
  for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
    case "${COMP_WORDS[i]}" in
      # Bash splits --project=P at the '=' (COMP_WORDBREAKS): the value is then two words on.
      -n|--namespace|--project)
        if [[ ${COMP_WORDS[i+1]} == "=" ]]; then
          printf -- '--project\n%s\n' "${COMP_WORDS[i+2]}"
        else
          printf -- '--project\n%s\n' "${COMP_WORDS[i+1]}"
        fi ;;
      --namespace=*|--project=*) printf -- '--project\n%s\n' "${COMP_WORDS[i]#*=}" ;;
    esac
  done
}
_nodus_job_names() {
  local IFS=$'\n'
  compgen -W "$(nodus jobs --names-only $(_nodus_project_args) 2>/dev/null)" -- "$1"
}
_nodus_job_targets() {
  local IFS=$'\n'
  compgen -P job/ -W "$(nodus jobs --names-only $(_nodus_project_args) 2>/dev/null)" -- "${1#job/}"
}
"""
_ZSH_PREAMBLE = r"""
_nodus_job_list() {
  local -a project
  local i
  for ((i = 1; i < CURRENT; i++)); do
    case ${words[i]} in
      -n|--namespace|--project) project=(--project ${words[i+1]}) ;;
    esac
  done
  reply=(${(f)"$(nodus jobs --names-only $project 2>/dev/null)"})
}
_nodus_job_names() {
  local -a reply
  _nodus_job_list
  compadd -a reply
}
_nodus_job_targets() {
  local -a reply
  _nodus_job_list
  compadd -P job/ -a reply
}
"""


def completion(args: argparse.Namespace) -> None:
    """The completion script of the real parser (every command and flag), with Job names completed from the
    server for the commands that take them."""
    import shtab

    from nodus.cli import main

    root = main.parser()
    preamble = {"bash": _BASH_PREAMBLE, "zsh": _ZSH_PREAMBLE}  # shtab writes it once however often named
    names = {"bash": "_nodus_job_names", "zsh": "_nodus_job_names", "preamble": preamble}
    targets = {"bash": "_nodus_job_targets", "zsh": "_nodus_job_targets", "preamble": preamble}
    for action in root._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for command, sub in action.choices.items():
            for argument in sub._actions:
                if _JOB_ARGUMENTS.get(command) == argument.dest:
                    argument.complete = names  # shtab's documented way: an attribute of the action
                elif _JOB_TARGETS.get(command) == argument.dest:
                    argument.complete = targets
    print(shtab.complete(root, shell=args.shell), end="")


def _config(args: argparse.Namespace) -> ClientConfig:
    from nodus.client import ClientConfig

    try:
        return ClientConfig.from_kubeconfig(kubeconfig_path(args))
    except OSError as exc:
        raise SystemExit(f"nodus: {exc}") from None


# Job names are RFC 1123 subdomains, projects RFC 1123 labels (what the server accepts at create): anything else
# names nothing, and is refused before it becomes a URL (``x/status`` would address a subresource).
_JOB_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_PROJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _job_name(given: str) -> str:
    """The Job ``given`` names (``NAME``, or ``job/NAME`` as kubectl and ``nodus logs`` write it)."""
    name = given.removeprefix("jobs/").removeprefix("job/")
    if not _JOB_NAME.fullmatch(name):
        raise SystemExit(
            f"nodus: {given!r} is not a Job name: a name is lower-case letters, digits, '-' and '.' (see `nodus jobs`)"
        )
    return name


def _project(args: argparse.Namespace, config: ClientConfig) -> str:
    project = str(args.project or config.namespace or "default")
    if not _PROJECT_NAME.fullmatch(project):
        raise SystemExit(
            f"nodus: {project!r} is not a project name: a name is lower-case letters, digits and '-' "
            "(kubectl get projects lists yours)"
        )
    return project


def _run(work: Any, config: ClientConfig) -> Any:
    """``asyncio.run(work)``, with a server that cannot be reached said in one line."""
    import httpx

    try:
        return asyncio.run(work)
    except httpx.TransportError as exc:
        raise SystemExit(
            f"nodus: cannot reach the API server at {config.server}: {exc or type(exc).__name__}"
        ) from None


def _refusal(exc: APIError) -> str:
    """A refusal as kubectl prints one, then the server's fix on a line of its own."""
    fix = exc.body.get("fix")
    return f"Error from server ({exc.reason}): {exc.message}" + (f"\n  fix: {fix}" if fix else "")


def _show(blocks: list[Any]) -> None:
    """Colour and tables on a terminal; plain aligned text anywhere else (a pipe, a file)."""
    from nodus.cli import jobtables

    if not sys.stdout.isatty():
        print(jobtables.plain(blocks))
        return
    from rich.console import Console

    console = Console(highlight=False)
    for renderable in jobtables.rich(blocks):
        console.print(renderable)
