"""One member of a Ray gang (the ``Ray`` and ``Verl`` launchers): start Ray here; on rank 0, run the command.

The agent writes this file to ``/nodus/gang/ray_gang.py`` and runs, on every rank::

    <python> -I /nodus/gang/ray_gang.py -- <the Job's command...>

It reads the gang from the Nodus environment contract: ``NODUS_NODE_RANK``, ``NODUS_GANG_SIZE``,
``NODUS_GPUS_PER_NODE``, ``NODUS_RENDEZVOUS_HOST``, ``NODUS_RENDEZVOUS_PORT`` and ``NODUS_GANG_HOSTS``.

Rank 0 (the head):

1. ``ray start --head --port=PORT --node-ip-address=HOST --num-gpus=G`` (the rendezvous port is Ray's GCS port;
   Ray opens its other ports itself);
2. polls ``ray status --address=HOST:PORT`` every :data:`POLL_SECONDS` until it lists N nodes (see
   :func:`joined_nodes`), for at most :data:`JOIN_TIMEOUT_SECONDS`: exit 1 if they never all join;
3. runs the command with ``RAY_ADDRESS=HOST:PORT``, then ``ray stop``, and exits with the command's exit code
   (128 + n for a command killed by signal n).

Other ranks wait until ``HOST:PORT`` accepts TCP connections (at most :data:`JOIN_TIMEOUT_SECONDS`: the head may
start a moment later), then run ``ray start --address=HOST:PORT --node-ip-address=<own host> --num-gpus=G --block``
and exit 0 when it returns, which it does once the head has gone away: the gang's result is rank 0's.

``ray`` is the one next to the interpreter running this file (a virtualenv's ``bin/``), else the one on ``PATH``;
without either the wrapper exits 127 saying so.

Signals. At a stop the runtime sends SIGTERM to every process of the attempt, so the wrapper forwards nothing; it
only outlives the signal (its handler does nothing but note it) to collect the command's exit code and stop Ray.
A stop before the command has started ends the wait for the nodes.

Standard library only, Python 3.8 or later: it runs with the Job's interpreter and imports nothing of nodus.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

POLL_SECONDS = 2.0
JOIN_TIMEOUT_SECONDS = 600.0
STATUS_TIMEOUT_SECONDS = 60.0
NOT_FOUND, NOT_EXECUTABLE = 127, 126  # as a shell reports them

# The sections of `ray status` that list the nodes in the cluster, one " <count> <node type>" line per kind:
# "Active:" and, since the v2 autoscaler's status, "Idle:" (disjoint from Active); "Healthy:" in older releases.
_NODE_SECTIONS = frozenset({"Active:", "Idle:", "Healthy:"})
_NODE_LINE = re.compile(r"^\s+(\d+)\s+\S")


@dataclass(frozen=True)
class Gang:
    """This member's view of the gang, from the environment contract."""

    rank: int
    size: int
    gpus: int
    head_host: str
    head_port: int
    own_host: str

    @property
    def address(self) -> str:
        return f"{self.head_host}:{self.head_port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Gang:
        """Raises KeyError or ValueError when the contract's variables are missing or malformed."""
        rank = int(env["NODUS_NODE_RANK"])
        hosts = env["NODUS_GANG_HOSTS"].split(",")
        return cls(
            rank=rank,
            size=int(env["NODUS_GANG_SIZE"]),
            gpus=int(env["NODUS_GPUS_PER_NODE"]),
            head_host=env["NODUS_RENDEZVOUS_HOST"],
            head_port=int(env["NODUS_RENDEZVOUS_PORT"]),
            own_host=hosts[rank],
        )


def head_start(ray: str, gang: Gang) -> list[str]:
    return [
        ray,
        "start",
        "--head",
        f"--port={gang.head_port}",
        f"--node-ip-address={gang.head_host}",
        f"--num-gpus={gang.gpus}",
    ]


def worker_start(ray: str, gang: Gang) -> list[str]:
    return [
        ray,
        "start",
        f"--address={gang.address}",
        f"--node-ip-address={gang.own_host}",
        f"--num-gpus={gang.gpus}",
        "--block",
    ]


def status(ray: str, gang: Gang) -> list[str]:
    return [ray, "status", f"--address={gang.address}"]


def joined_nodes(status_text: str) -> int:
    """How many nodes ``ray status`` lists: the sum of the counts under its node sections.

    The text looks like this (``ray/autoscaler/_private/util.py``, ``format_info_string``); a cluster started by
    hand lists each node as its own kind, ``node_<id>``, with count 1::

        ======== Autoscaler status: 2025-01-01 10:00:00 ========
        Node status
        --------------------------------------------------------
        Active:
         1 node_5f0c...
         1 node_9a41...
        Idle:
         (no idle nodes)
        Pending:
         (no pending nodes)
        ...

    Text without those sections (Ray still starting, an error) counts 0.
    """
    count, in_nodes = 0, False
    for line in status_text.splitlines():
        if line[:1].strip():  # a heading: not indented
            in_nodes = line.strip() in _NODE_SECTIONS
            continue
        match = _NODE_LINE.match(line) if in_nodes else None
        if match:
            count += int(match.group(1))
    return count


def find_ray(interpreter: str, path: str | None) -> str | None:
    """``ray`` next to ``interpreter`` (a virtualenv's bin/), else on ``path``; None when neither has it."""
    beside = Path(interpreter).parent / "ray"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("ray", path=path)


def exit_code(returncode: int) -> int:
    """A shell's exit status for a child's return code: 128 + n for death by signal n."""
    return 128 - returncode if returncode < 0 else returncode


class _Stop:
    """Notes SIGTERM and SIGINT instead of dying of them (see the module docstring)."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._note)

    def _note(self, number: int, frame: FrameType | None) -> None:
        self.requested = True


def wait_for_port(host: str, port: int, timeout: float, stop: _Stop | None = None) -> bool:
    """True once ``host:port`` accepts a TCP connection; False after ``timeout`` seconds or a stop."""
    deadline = time.monotonic() + timeout
    while not (stop and stop.requested):
        try:
            with socket.create_connection((host, port), timeout=POLL_SECONDS):
                return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0.0)))
    return False


def wait_for_nodes(ray: str, gang: Gang, timeout: float, stop: _Stop) -> int:
    """Poll ``ray status`` until it lists ``gang.size`` nodes; the last count seen (less on timeout or stop)."""
    deadline, seen = time.monotonic() + timeout, 0
    while not stop.requested:
        try:
            done = subprocess.run(
                status(ray, gang), check=False, capture_output=True, text=True, timeout=STATUS_TIMEOUT_SECONDS
            )
            seen = joined_nodes(done.stdout)
        except subprocess.TimeoutExpired:
            pass
        if seen >= gang.size or time.monotonic() >= deadline:
            return seen
        time.sleep(POLL_SECONDS)
    return seen


def _say(message: str) -> None:
    print(f"nodus ray gang: {message}", file=sys.stderr, flush=True)


def run_head(ray: str, gang: Gang, command: list[str], stop: _Stop) -> int:
    started = subprocess.run(head_start(ray, gang), check=False)
    if started.returncode != 0:
        _say(f"`ray start --head` failed with exit code {started.returncode}")
        return exit_code(started.returncode)
    try:
        seen = wait_for_nodes(ray, gang, JOIN_TIMEOUT_SECONDS, stop)
        if stop.requested:
            return 128 + signal.SIGTERM
        if seen < gang.size:
            _say(f"only {seen} of {gang.size} Ray nodes joined in {JOIN_TIMEOUT_SECONDS:.0f} s; see the other ranks")
            return 1
        _say(f"all {gang.size} nodes joined the Ray cluster at {gang.address}; running the command")
        try:
            child = subprocess.Popen(command, env={**os.environ, "RAY_ADDRESS": gang.address})
        except OSError as exc:
            _say(f"cannot run {command[0]!r}: {exc}")
            return NOT_FOUND if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE
        return exit_code(child.wait())
    finally:
        subprocess.run([ray, "stop"], check=False)


def run_worker(ray: str, gang: Gang, stop: _Stop) -> int:
    if not wait_for_port(gang.head_host, gang.head_port, JOIN_TIMEOUT_SECONDS, stop):
        if stop.requested:
            return 128 + signal.SIGTERM
        _say(f"the Ray head at {gang.address} did not come up in {JOIN_TIMEOUT_SECONDS:.0f} s")
        return 1
    ended = subprocess.run(worker_start(ray, gang), check=False)
    _say(f"`ray start --block` returned {ended.returncode}: the head has gone away")
    return 0


def main(argv: list[str]) -> int:
    """Run this member; ``argv`` is ``["--", command...]``. Returns the exit code."""
    if argv[:1] != ["--"] or len(argv) < 2:
        _say("usage: ray_gang.py -- <command...>")
        return 2
    command = argv[1:]
    gang = Gang.from_env(os.environ)
    ray = find_ray(sys.executable, os.environ.get("PATH"))
    if ray is None:
        _say(f"ray is not installed: no `ray` beside {sys.executable} or on PATH ({os.environ.get('PATH', '')})")
        return NOT_FOUND
    stop = _Stop()
    stop.install()
    if gang.rank == 0:
        return run_head(ray, gang, command, stop)
    return run_worker(ray, gang, stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
