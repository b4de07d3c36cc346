"""The README's walkthrough and docs/api.md's curl examples, run as written and in order on a fresh `nodus dev`
(ADR 0039).

The commands are read from the documents (``tests/support/walkthrough.py``), so a document cannot drift from
what is tested: a command that fails, prints a failed Status or never shows what the document promises fails
the test. ``STEPS`` holds what the test knows about a command beyond its exit code, keyed by the command exactly
as documented (its trailing comment cut): when the command changes, the test says which entry lost its command.

The default run walks the README's first block (kubectl, a Job of four indexes, its attempts and logs) and then
docs/api.md's curl block, about 40 s: it is the first thing a newcomer runs, and the only test of the documents
in ``make test``. The whole README (long Job, checkpoints, suspend, preemption, pipeline, gang, money) takes a
few minutes and runs in the slow tier.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from nodus.storage import database
from tests.support import walkthrough
from tests.support.cluster import free_port
from tests.support.walkthrough import Step, Workspace, eventually

pytestmark = pytest.mark.e2e

README = walkthrough.ROOT / "README.md"
API = walkthrough.ROOT / "docs" / "api.md"


def _readme() -> list[list[str]]:
    return walkthrough.commands(README, "Using it")


def _curl() -> list[list[str]]:
    return walkthrough.commands(API, "curl")


# --- what each documented command promises ------------------------------------------------------------


def _kubectl_in_cache(workspace: Workspace) -> None:
    target = workspace.directory / ".cache" / "kubectl-v35" / "kubectl"
    target.parent.mkdir(parents=True)
    target.symlink_to(workspace.kubectl_binary)


def _contains(*texts: str) -> Step:
    def check(workspace: Workspace, out: str) -> None:
        for text in texts:
            assert re.search(text, out, re.MULTILINE), workspace.failure(f"no /{text}/ in the output", out, "")

    return Step(then=check)


def _phase(workspace: Workspace, kind: str, name: str) -> str | None:
    phase = (workspace.get(kind, name).get("status") or {}).get("phase")
    return str(phase) if phase is not None else None


def _gone(kind: str, name: str) -> Step:
    def check(workspace: Workspace, _: str) -> None:
        found = workspace.kubectl("get", kind, name, check=False)
        assert found.returncode != 0 and "NotFound" in found.stderr, found.stdout + found.stderr

    return Step(then=check)


def _checkpoint_taken(workspace: Workspace, _: str) -> None:
    """The annotation asks every running attempt for a checkpoint: one is committed after it."""
    asked = workspace.get("job", "long")["metadata"]["annotations"]["nodus.dev/checkpoint-requested-at"]

    def committed() -> bool:
        status = workspace.get("job", "long").get("status") or {}
        taken = (status.get("checkpoint") or {}).get("time")
        handled = (status.get("handledRequests") or {}).get("checkpoint")
        return handled == asked and taken is not None and _time(taken) >= _time(asked)

    eventually(committed, "a checkpoint committed for the request")


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _suspended(workspace: Workspace, _: str) -> None:
    assert _phase(workspace, "attempt", "long-0-1") == "Stopped"
    assert (workspace.get("job", "long").get("status") or {}).get("checkpoint", {}).get("seq", 0) >= 2


def _preempted(workspace: Workspace, _: str) -> None:
    lost = workspace.get("attempt", "long-0-2").get("status") or {}
    assert (lost.get("phase"), lost.get("reason")) == ("Lost", "Preempted"), lost


def _cancelled(workspace: Workspace, _: str) -> None:
    eventually(lambda: _phase(workspace, "job", "long") == "Cancelled", "long Cancelled")


def _rank_files(workspace: Workspace, _: str) -> None:
    for rank in (0, 1):
        assert (workspace.directory / f"rank-{rank}" / "rank.txt").read_text().strip() == f"rank {rank}"


def _summary(workspace: Workspace, _: str) -> None:
    summary = (workspace.directory / "summary.txt").read_text()
    assert "/nodus/inputs/model/weights/model.txt" in summary and "/nodus/inputs/table/table.csv" in summary


def _no_guess(workspace: Workspace, out: str) -> None:
    # The examples declare expectedDuration: the first estimate is not the one-hour guess.
    assert "NoExpectedDuration" not in out, out


STEPS: dict[str, Step] = {
    # README, first steps
    "make kubectl": Step(instead=_kubectl_in_cache),
    "kubectl get offerings": _contains(r"^l4-24g-x1-us\s"),
    ".venv/bin/nodus run --yes -- python -c 'print(42)'": _contains(
        r"^job/python-[a-z0-9]+ created$", r"^42$", r"^job/python-[a-z0-9]+ Succeeded ", r"^cost: "
    ),
    ".venv/bin/nodus jobs": _contains(r"^python-[a-z0-9]+\s+Succeeded\s+1/1\s"),
    ".venv/bin/nodus logs job/hello --index 2 -f": _contains(r"^index 2 of job hello on ", r"^step 3$"),
    "kubectl get jobs -w": Step(until=r"^hello\s+Succeeded\s+4/4"),
    "kubectl get attempts": _contains(*(rf"^hello-{i}-1\s+hello\s+{i}\s+1\s+Succeeded" for i in range(4))),
    "kubectl get attempt hello-0-1 -o jsonpath='{.status.placement.explain}'": _contains(r"chose l4-24g-x1-us"),
    "kubectl explain jobs.spec.placement": _contains(r"interruptible"),
    "kubectl delete job hello": _gone("job", "hello"),
    # README, a long Job
    # Progress is reported at most every 5 s (docs/data-plane.md, Progress): the get below comes after that.
    ".venv/bin/nodus logs job/long -f": Step(until=r"^step 8 of 180$"),
    "kubectl get nodes.nodus.dev": _contains(r"\sReady\s+True\s"),
    "kubectl get job long -o jsonpath='{.status.progress}'": _contains(r'"stage":"loop"'),
    "kubectl annotate job long nodus.dev/checkpoint-requested-at=$(date -u +%FT%TZ)": Step(then=_checkpoint_taken),
    "kubectl get job long -o jsonpath='{.status.checkpoint}'": _contains(r'"seq":\d+'),
    "kubectl wait job/long --for=jsonpath='{.status.phase}'=Suspended": Step(then=_suspended),
    ".venv/bin/nodus sim preempt $(kubectl get attempt long-0-2 -o jsonpath='{.spec.node}') --notice 10s": _contains(
        r"preempt requested"
    ),
    "kubectl get attempts -l nodus.dev/job=long -w": Step(until=r"^long-0-3\s.*\sRunning\s", then=_preempted),
    ".venv/bin/nodus logs job/long | head -1": _contains(r"^resumed at step \d+ from checkpoint \d+$"),
    """kubectl patch job long --type merge -p '{"spec":{"state":"Cancelled"}}'""": Step(then=_cancelled),
    "kubectl delete job long": _gone("job", "long"),
    # README, outputs, inputs and Secrets
    "kubectl get pipelines": _contains(r"^ml\s+3/3\s+Succeeded\s+\$"),
    "kubectl get jobs -l nodus.dev/pipeline=ml": _contains(
        *(rf"^ml-{s}\s+Succeeded\s" for s in ("data", "train", "report"))
    ),
    "kubectl get job ml-train -o jsonpath='{.status.progress}'": _contains(r'"completed":5'),
    ".venv/bin/nodus outputs get ml-report summary": Step(then=_summary),
    "kubectl get secrets.nodus.dev api -o yaml": _contains(r"^  - token$"),
    # README, a gang
    "kubectl get job gang -o jsonpath='{.status.gang}'": _contains(r'"phase":"Done"'),
    ".venv/bin/nodus outputs get gang rank": Step(then=_rank_files),
    # README, money
    ".venv/bin/nodus estimate -f docs/examples/hello.yaml": Step(then=_no_guess),
    "kubectl get project default -o jsonpath='{.status.credits}'": _contains(r'"balanceUSD"'),
    "kubectl apply -f docs/examples/budget.yaml && kubectl get budgets": _contains(
        r"^research\s+50(\.00)?\s+Monthly\s"
    ),
    # docs/api.md
    "curl --cacert $CA -H \"Authorization: Bearer $TOKEN\" -X PATCH -H 'Content-Type: application/merge-patch+json' "
    '-d \'{"spec":{"parallelism":2}}\' $S/apis/nodus.dev/v1/namespaces/default/jobs/epochs': _contains(
        r'"parallelism":2'
    ),
    'curl --cacert $CA -H "Authorization: Bearer $TOKEN" -N '
    '"$S/apis/nodus.dev/v1/jobs?watch=true&allowWatchBookmarks=true"': Step(
        until=r'"name":"epochs".*"phase":"Succeeded"'
    ),
}


def test_every_step_names_a_documented_command() -> None:
    documented = {command for blocks in (_readme(), _curl()) for block in blocks for command in block}
    assert set(STEPS) - documented == set(), "these STEPS lost their command in README.md or docs/api.md"
    streaming = {c for c in documented if re.search(r"(\s-w\b|watch=true|\s-f$)", c)}
    endless = {c for c in streaming if STEPS.get(c, Step()).until is None and "--index" not in c}
    assert endless == set(), "a command that streams until Ctrl-C needs an `until` in STEPS"


# --- the walks -------------------------------------------------------------------------------------


@pytest.fixture
def workspace(database_server: str, tmp_path: Path, kubectl_binary: Path) -> Iterator[Workspace]:
    """A fresh `nodus dev` (its own database) serving from ``tmp_path/.nodus``, the reader's working directory."""
    url = asyncio.run(database.create_database(database_server))
    try:
        walkthrough.prepare(tmp_path)
        serving = walkthrough.start(tmp_path, free_port(), url)
        try:
            yield Workspace(tmp_path, walkthrough.environment(tmp_path), serving.log, kubectl_binary)
        finally:
            walkthrough.stop(serving.process)
    finally:
        asyncio.run(database.drop_database(url))


def test_first_steps_and_curl(workspace: Workspace) -> None:
    """The README's first block, then docs/api.md's curl block, on the same server."""
    walkthrough.walk(workspace, _readme()[:1], STEPS)
    walkthrough.walk(workspace, _curl(), STEPS)
    _report(workspace)


@pytest.mark.slow
def test_the_whole_readme(workspace: Workspace) -> None:
    walkthrough.walk(workspace, _readme(), STEPS)
    _report(workspace)


def _report(workspace: Workspace) -> None:
    # Seen with `pytest -s` (or on failure): where the walk spends its time.
    for seconds, command in workspace.timings:
        print(f"{seconds:6.1f}s  {command}")
