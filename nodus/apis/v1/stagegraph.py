"""The stage graph of a Pipeline: its edges, its cycles, its stage Jobs' names and specs, written once.

Shared by the API server (validation at create) and the Pipeline controller (what to start, what a
failure stops), so both read the same graph. Everything here is pure.

* A stage's upstream stages are its ``dependsOn`` and the producing stage of each ``fromStage``
  input, in that order, without repeats.
* A stage's Job is ``<pipeline>-<stage>``. Its spec is the template's, with every ``fromStage``
  input rewritten to ``output: {job: <pipeline>-<producer>, name: <output>}``: the Job then pins the
  producer's committed output by SHA-256 at admission, like any other output input (ADR 0052), and
  the Job kind never has to accept ``fromStage``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodus.apis.v1.pipeline import PipelineStage

Graph = Mapping[str, Sequence[str]]
"""stage name -> the names of the stages it waits for."""


def job_name(pipeline: str, stage: str) -> str:
    """The name of the Job that runs ``stage`` of ``pipeline``."""
    return f"{pipeline}-{stage}"


def upstream(stage: PipelineStage) -> list[str]:
    """The stages ``stage`` waits for: ``dependsOn``, then each ``fromStage`` producer, without repeats."""
    names = list(stage.depends_on or ())
    names += [item.from_stage.stage for item in stage.template.spec.inputs or () if item.from_stage is not None]
    return list(dict.fromkeys(names))


def graph(stages: Iterable[PipelineStage]) -> dict[str, list[str]]:
    return {stage.name: upstream(stage) for stage in stages}


def find_cycle(edges: Graph) -> list[str] | None:
    """A cycle of ``edges`` as the stages along it, first repeated last (``[a, b, a]``), or None when acyclic.

    Edges to stages that do not exist are ignored (validation names those separately)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for up in edges.get(name, ()):
            if up not in edges:
                continue
            if state.get(up) == 1:
                return [*path[path.index(up) :], up]
            if up not in state:
                found = visit(up)
                if found is not None:
                    return found
        path.pop()
        state[name] = 2
        return None

    for name in edges:
        if name not in state:
            found = visit(name)
            if found is not None:
                return found
    return None


def downstream(edges: Graph, stage: str) -> set[str]:
    """Every stage that waits, directly or not, for ``stage`` (``stage`` excluded)."""
    out: set[str] = set()
    frontier = [stage]
    while frontier:
        current = frontier.pop()
        for name, ups in edges.items():
            if current in ups and name not in out:
                out.add(name)
                frontier.append(name)
    return out


def upstream_closure(edges: Graph, stage: str) -> set[str]:
    """Every stage ``stage`` waits for, directly or not (``stage`` excluded)."""
    out: set[str] = set()
    frontier = list(edges.get(stage, ()))
    while frontier:
        current = frontier.pop()
        if current not in out and current in edges:
            out.add(current)
            frontier.extend(edges[current])
    return out


def concurrent_with(edges: Graph, stage: str) -> set[str]:
    """The stages that may run at the same time as ``stage``: neither upstream nor downstream of it."""
    return set(edges) - {stage} - upstream_closure(edges, stage) - downstream(edges, stage)


def stage_job_spec(
    pipeline: str, template_spec: Mapping[str, Any], producers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The stage Job's spec: the template's (a deep copy), each ``fromStage`` rewritten to the producing Job's
    output (see the module docstring). ``producers`` names the producing stages' current Jobs where they are not
    ``<pipeline>-<stage>`` (a re-run's, or a reused one)."""
    known = producers or {}
    spec = copy.deepcopy(dict(template_spec))
    for item in spec.get("inputs") or ():
        if not isinstance(item, dict):
            continue
        source = item.get("fromStage")
        if isinstance(source, dict):
            del item["fromStage"]
            producer = str(source.get("stage"))
            item["output"] = {"job": known.get(producer) or job_name(pipeline, producer), "name": source.get("output")}
    return spec
