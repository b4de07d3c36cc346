"""Running documented shell commands as a reader would: as written, in order, on a fresh ``nodus dev`` (ADR 0039).

The commands come from the ```` ```sh ```` blocks of a document's section, so what the tests run is what the
document says. Each runs in its own ``bash -c`` from a workspace laid out like the checkout (``docs`` and
``.venv`` are links to it; ``.nodus`` is the fresh data directory), after every earlier line that only sets
variables (``export PATH=...``, ``TOKEN=$(...)``): the shell a reader types into keeps them, and replaying
them is how these separate shells keep them too. A command must exit 0 and never print a failed
``metav1.Status``; one that streams until Ctrl-C (``-w``, ``-f``) is read until its output shows what the
document promises, then gets SIGINT, as a reader's terminal sends it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
# A line that only assigns variables: kept and replayed before every later command.
_ASSIGNMENT = re.compile(r"^(export\s+)?[A-Za-z_][A-Za-z0-9_]*=")
# A trailing comment: a '#' after whitespace and before whitespace (never inside the commands documented).
_COMMENT = re.compile(r"\s+#\s.*$")
_FAILED_STATUS = ('"status":"Failure"', '"type":"ERROR"')
COMMAND_TIMEOUT = 180.0


def commands(document: Path, heading: str) -> list[list[str]]:
    """The commands of each ```` ```sh ```` block under the ``## heading`` of ``document``, block by block:
    comment lines dropped, lines continued with a backslash joined, trailing comments cut."""
    lines = document.read_text().splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    blocks: list[list[str]] = []
    block: list[str] | None = None
    pending = ""
    for raw in lines[start:end]:
        if block is None:
            if raw.strip() == "```sh":
                block = []
            continue
        if raw.strip() == "```":
            assert not pending, f"{document.name}: a block ends inside a continued command: {pending}"
            blocks.append(block)
            block = None
            continue
        line = f"{pending} {raw.strip()}" if pending else raw
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        text = _COMMENT.sub("", line).strip()
        if text and not text.startswith("#"):
            block.append(text)
    assert blocks, f"{document.name} has no sh block under '## {heading}'"
    return blocks


@dataclass(frozen=True)
class Step:
    """What a test knows about one documented command beyond "it exits 0".

    ``until``: the command streams until Ctrl-C; its output is read until this pattern matches.
    ``instead``: the test does this in place of running the command (``make kubectl``: the checkout's
    Makefile would reinstall the virtualenv when pyproject.toml is newer than it).
    ``then``: called with the workspace and the command's output once it ended: checks the state the document
    promises, waiting for it where the document's reader would see it happen.
    """

    until: str | None = None
    instead: Callable[[Workspace], None] | None = None
    then: Callable[[Workspace, str], None] | None = None


@dataclass
class Workspace:
    """A directory laid out like the checkout, with ``nodus dev`` serving from ``.nodus`` in it."""

    directory: Path
    env: dict[str, str] = field(repr=False)
    server_log: Path
    kubectl_binary: Path
    prelude: list[str] = field(default_factory=list, repr=False)
    timings: list[tuple[float, str]] = field(default_factory=list, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.directory / ".nodus" / "kubeconfig"

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The real kubectl as the test's own eyes (not a documented command)."""
        env = {**self.env, "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run(
            [str(self.kubectl_binary), *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )
        if check:
            assert result.returncode == 0, self.failure(f"kubectl {' '.join(args)}", result.stdout, result.stderr)
        return result

    def get(self, kind: str, name: str) -> dict[str, Any]:
        value = orjson.loads(self.kubectl("get", kind, name, "-o", "json").stdout)
        assert isinstance(value, dict)
        return value

    def failure(self, what: str, out: str, err: str) -> str:
        log = self.server_log.read_text(errors="replace")[-6000:]
        return f"{what}\n--- stdout ---\n{out[-6000:]}\n--- stderr ---\n{err[-4000:]}\n--- nodus dev ---\n{log}"

    def run(self, command: str, step: Step | None) -> str:
        """Run one documented command (or what the test does instead) and check its promise; its output."""
        started = time.monotonic()
        step = step or Step()
        if step.instead is not None:
            step.instead(self)
            out = ""
        elif _ASSIGNMENT.match(command):
            out = self._finished(command)
            self.prelude.append(command)
        elif step.until is not None:
            out = self._streamed(command, step.until)
        else:
            out = self._finished(command)
        if step.then is not None:
            step.then(self, out)
        self.timings.append((time.monotonic() - started, command))
        return out

    def _script(self, command: str) -> list[str]:
        return ["bash", "-c", "\n".join([*self.prelude, command])]

    def _finished(self, command: str) -> str:
        result = subprocess.run(
            self._script(command),
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, self.failure(
            f"exit {result.returncode}: {command}", result.stdout, result.stderr
        )
        self._no_failed_status(command, result.stdout, result.stderr)
        return result.stdout

    def _streamed(self, command: str, until: str) -> str:
        pattern = re.compile(until, re.MULTILINE)
        process = subprocess.Popen(
            self._script(command),
            cwd=self.directory,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a terminal's foreground job: Ctrl-C reaches all
        )
        assert process.stdout is not None and process.stderr is not None
        out: list[str] = []
        err: list[str] = []
        readers = [_drain(process.stdout, out), _drain(process.stderr, err)]
        deadline = time.monotonic() + COMMAND_TIMEOUT
        try:
            while not pattern.search("".join(out)):
                finished = process.poll() is not None and not any(r.is_alive() for r in readers)
                if finished or time.monotonic() > deadline:
                    what = f"exit {process.returncode}" if finished else f"no /{until}/ within {COMMAND_TIMEOUT:.0f}s"
                    raise AssertionError(self.failure(f"{what}: {command}", "".join(out), "".join(err)))
                time.sleep(0.1)
        finally:
            _interrupt(process)
            for reader in readers:
                reader.join(timeout=10)
            process.stdout.close()
            process.stderr.close()
        self._no_failed_status(command, "".join(out), "".join(err))
        return "".join(out)

    def _no_failed_status(self, command: str, out: str, err: str) -> None:
        compact = out.replace(" ", "")
        assert not any(s in compact for s in _FAILED_STATUS), self.failure(f"a failed Status: {command}", out, err)


def _drain(stream: Any, into: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: into.extend(iter(stream.readline, "")), daemon=True)
    thread.start()
    return thread


def _interrupt(process: subprocess.Popen[str]) -> None:
    """Ctrl-C: SIGINT to the command's process group, SIGKILL if it is still there 10 s later."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def prepare(directory: Path) -> None:
    """Lay ``directory`` out like the checkout: the documents' relative paths resolve to it."""
    for name in ("docs", ".venv"):
        (directory / name).symlink_to(ROOT / name)


def environment(directory: Path) -> dict[str, str]:
    """The reader's environment: nothing of the test run's Nodus or kubectl settings; HOME in the workspace
    (kubectl keeps its discovery cache there)."""
    dropped = ("NODUS_DATABASE_URL", "KUBECONFIG")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["HOME"] = str(directory)
    return env


@dataclass
class Serving:
    process: subprocess.Popen[bytes]
    log: Path


def start(directory: Path, port: int, database_url: str, args: tuple[str, ...] = ()) -> Serving:
    """``nodus dev`` (what ``make dev`` runs) on ``directory/.nodus``, once it says it is serving."""
    log = directory / "nodus-dev.log"
    command = [sys.executable, "-m", "nodus.cli.main", "dev", "--data-dir", str(directory / ".nodus")]
    command += ["--port", str(port), "--database-url", database_url, *args]
    with log.open("wb") as output:  # a file, not a pipe: nobody has to drain it for the server to go on
        process = subprocess.Popen(
            command, cwd=directory, env=environment(directory), stdout=output, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 120
    while "export KUBECONFIG=" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise AssertionError("nodus dev did not start:\n" + log.read_text(errors="replace")[-6000:])
        time.sleep(0.2)
    return Serving(process, log)


def stop(process: subprocess.Popen[bytes]) -> int:
    """Ctrl-C for ``make dev``: SIGINT, then its exit code."""
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


def eventually(check: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    """Poll ``check`` until it holds (a generous timeout, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.5)


def walk(workspace: Workspace, blocks: list[list[str]], steps: dict[str, Step]) -> None:
    """Run every command of ``blocks`` in order, each with its step if it has one."""
    for block in blocks:
        for command in block:
            workspace.run(command, steps.get(command))
