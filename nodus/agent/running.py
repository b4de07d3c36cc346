"""One attempt on this host: start it in the runtime, ship its output, report how it ended.

Every transition is reported through the Attempt's ``/status``: ``Starting`` (with the runtime and
the visible GPUs), ``Running`` (``startTime``), then exactly one terminal phase:

* ``Succeeded`` (exit 0, reason ``Completed``);
* ``Failed``: a customer failure, reason ``Error`` with the exit code (or the signal) and the last
  three log lines, or ``OOMKilled``;
* ``Stopped``: stopped on request (``spec.stop``), reason taken from the request;
* ``Lost`` with reason ``Preempted``: the host is being reclaimed and stopped the program first.

Checkpoints (``nodus.agent.checkpointing``): a Checkpointed attempt restores ``spec.restore`` before its
program starts, checkpoints on its cadence and when asked (``spec.checkpointRequest``), and before a stop
that asks for one (a suspend: tried three times, after which it keeps running and says so) or a host going
away with notice (one try, within the notice).

Logs are flushed before the terminal report, so whoever sees the end can read every line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from nodus.agent import (
    attemptdecisions as decisions,
)
from nodus.agent import (
    checkpointing,
    collecting,
    containerizing,
    ganging,
    gpus,
    images,
    materializing,
    meshing,
    progress,
    unpacking,
)
from nodus.agent.contract import (
    DEFAULT_WORKING_DIR,
    HostFacts,
    egress_of,
    environment,
    masked_values,
    reach_of,
    scrub,
    sidecars_of,
)
from nodus.agent.layout import PROGRESS_FILE, AttemptLayout
from nodus.agent.materializing import Prepared, PrepareFailed
from nodus.agent.runtime import ContainerImage, Exit, Mount, Process, RunSpec, Runtime, Sidecar
from nodus.agent.shipping import LogShipper
from nodus.apimachinery import imagerefs, units
from nodus.apis.v1 import objects, phases
from nodus.apis.v1.jobspec import InitCommand
from nodus.client import Client, errors

Object = dict[str, Any]
T = TypeVar("T")
log = logging.getLogger("nodus.agent")

INIT_CONTAINER = "init"
MESSAGE_LINES = 3
_PROGRESS_DELAYS = (0.2, 0.5, 1, 2, 5, 5, 5, 10, 10, 10)


@dataclass(frozen=True)
class Pulled:
    """The attempt's image on this host, the argv it runs, and each sidecar's own image by name."""

    image: images.Image
    argv: list[str]
    sidecars: dict[str, images.Image]


@dataclass
class AttemptRun:
    """The run of one attempt; ``task`` ends after the terminal report."""

    attempt: Object
    client: Client
    runtime: Runtime
    host: HostFacts
    process: Process | None = None
    task: asyncio.Task[None] | None = None
    checkpointer: checkpointing.Checkpointer | None = None
    # Every stop decision is made by nodus.agent.attemptdecisions from this state; the event mirrors its `pending`.
    stop: decisions.StopState = field(default_factory=decisions.StopState)
    _tail: deque[str] = field(default_factory=lambda: deque(maxlen=MESSAGE_LINES))
    _cadence: asyncio.Task[None] | None = None
    _requests: set[asyncio.Task[bool]] = field(default_factory=set)
    _stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    # Secret values (and their lines) never leave the host in a log line or a message, even if printed.
    _masked: list[str] = field(default_factory=list, repr=False)

    @property
    def view(self) -> objects.Attempt:
        """The attempt as last seen, typed (parsed once per resourceVersion)."""
        return objects.read(objects.Attempt, self.attempt)

    @property
    def name(self) -> str:
        return self.view.metadata.name

    @property
    def namespace(self) -> str:
        return str(self.view.metadata.namespace)

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"attempt {self.namespace}/{self.name}")

    @property
    def stop_reason(self) -> str | None:
        return self.stop.stop_reason

    @property
    def lost_reason(self) -> str | None:
        return self.stop.lost_reason

    def request_stop(
        self,
        reason: str,
        grace_seconds: float,
        *,
        lost_reason: str | None = None,
        checkpoint: bool = False,
        deadline: datetime | None = None,
        requested_time: str | None = None,
    ) -> None:
        """Stop the program (SIGTERM, SIGKILL after the grace). With ``lost_reason`` the host is going
        away, and the attempt ends ``Lost`` rather than ``Stopped``; with notice (a grace) a Checkpointed
        attempt checkpoints first. ``checkpoint`` asks for a checkpoint before a stop (until ``deadline``).
        The decisions are ``attemptdecisions.requested``'s."""
        request = decisions.StopRequest(reason, grace_seconds, lost_reason, checkpoint, deadline, requested_time)
        self._apply(decisions.requested(self.stop, request, units.now()))

    def withdraw_stop(self) -> None:
        """The stop request was taken back (a suspend undone) before the program was stopped: keep running."""
        self._apply(decisions.withdrawn(self.stop))

    def _apply(self, state: decisions.StopState) -> None:
        self.stop = state
        if state.pending:
            self._stop_requested.set()
        else:
            self._stop_requested.clear()

    def update(self, attempt: Object) -> None:
        """The attempt as the API server has it now: answer a new ``spec.checkpointRequest``."""
        self.attempt = attempt
        request = self.view.spec.checkpoint_request
        checkpointer = self.checkpointer
        if not request or checkpointer is None or checkpointer.process is None or request in checkpointer.requests:
            return
        checkpointer.requests.add(request)
        task = asyncio.create_task(checkpointer.take("Requested", request=request))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _run(self) -> None:
        spec = self.view.spec
        image = spec.image
        in_image = self.host.images is not None
        await self._report(
            phase="Starting",
            runtime={
                "sandbox": self.runtime.name,
                **(
                    {"image": f"{image} (recorded, not pulled: the local runtime uses the host's filesystem)"}
                    if image and not in_image
                    else {}
                ),
            },
            gpuIndexes=self.host.gpu_indexes,
        )
        argv = [*(spec.command or ()), *(spec.args or ())]
        if not in_image and (not argv or any(sidecar.image for sidecar in spec.sidecars or ())):
            # The bubblewrap runtime, chosen by name, runs on the host's filesystem: it refuses what needs an image.
            what = "an image's own entrypoint" if not argv else "a sidecar in its own image"
            message = f"This node's runtime ({self.runtime.name}) runs no images, so not {what}; set the command."
            await self._report(phase="Failed", reason="Error", message=message, finishTime=_now())
            return
        layout = AttemptLayout.create(self.host.work_dir / "attempts", f"{self.namespace}.{self.name}")
        shipper = LogShipper(self.client, self.namespace, self.name)
        try:
            await self._run_in(layout, shipper, argv)
        finally:
            await shipper.close()
            layout.remove()

    async def _run_in(self, layout: AttemptLayout, shipper: LogShipper, argv: list[str]) -> None:
        attempt = self.view
        spec = attempt.spec
        working_dir = spec.working_dir or DEFAULT_WORKING_DIR
        pulled: Pulled | None = None
        if self.host.images is not None:
            outcome = await self._unless_stopped(self._pull(self.host.images))
            if outcome is None:
                return await self._report_stopped_early()
            if not isinstance(outcome, Pulled):
                return await self._report_pull_failure(outcome)
            pulled = outcome
            argv = pulled.argv
            working_dir = containerizing.working_dir_for(spec, pulled.image)[0]
        prepared = await self._unless_stopped(
            materializing.prepare(
                self.client,
                attempt,
                layout,
                working_dir,
                self.host.trust_ca,
                reach=reach_of(spec, self.host),
                # User archives are unpacked in a sandbox of their own, hiding what the program's hides.
                unpacker=unpacking.Unpacker.for_runtime(self.runtime, (str(self.host.work_dir), *self.host.hidden)),
            )
        )
        if prepared is None:
            return await self._report_stopped_early()
        if isinstance(prepared, PrepareFailed):
            await self._report(
                phase="Failed", reason=prepared.reason, message=scrub(str(prepared), 2000), finishTime=_now()
            )
            return None
        self._masked = masked_values(prepared.secret_values)
        if spec.init_command:
            # The init command may take long: say the inputs are in place now.
            await self._report(**_inputs_ready(prepared))
        try:
            policy = checkpointing.Policy.of(
                self.attempt["spec"], lambda path: collecting.locate(path, layout, prepared)
            )
        except checkpointing.CheckpointError as exc:
            await self._report(phase="Failed", reason=exc.reason, message=str(exc), finishTime=_now())
            return None
        if policy is not None:
            self.checkpointer = checkpointing.Checkpointer(
                self.client,
                self.attempt,
                layout,
                policy,
                mtbi=self.host.mtbi,
                time_scale=self.host.checkpoint_time_scale,
            )
            restored = await self._unless_stopped(self._restore(self.checkpointer))
            if restored is None:
                return await self._report_stopped_early()
            if isinstance(restored, checkpointing.CheckpointError):
                # Nodus could not give the program its state back: lost, not the customer's failure.
                await self._report(phase="Lost", reason=restored.reason, message=str(restored), finishTime=_now())
                return None
        gang: ganging.Joined | None = None
        if spec.gang:
            joined = await self._unless_stopped(self._join(layout, argv))
            if joined is None:
                return await self._report_stopped_early()
            if not isinstance(joined, ganging.Joined):
                # Nodus could not mesh the gang: lost (the assembly is tried again), not the customer's failure.
                await self._report(
                    phase="Lost", reason="MeshFailed", message=scrub(str(joined), 2000), finishTime=_now()
                )
                return None
            gang, argv = joined, joined.argv
        try:
            await self._start(layout, shipper, argv, prepared, policy, gang, pulled)
        finally:
            if gang is not None:
                await gang.close()
        return None

    async def _pull(self, cache: images.ImageCache) -> Pulled | images.ImageError | containerizing.NoCommand:
        """The Job's image (and its sidecars') on this host, pulled once per host and digest (Boot time, ADR 0042)."""
        spec = self.view.spec
        reference = spec.image or ""
        try:
            parsed = imagerefs.parse(reference)
            credentials = await containerizing.pull_credentials(self.client, self.namespace, spec, parsed.registry)
            image = await cache.ensure(reference, credentials=credentials, pinned_digest=None)
            sidecars: dict[str, images.Image] = {}
            for sidecar in spec.sidecars or ():
                if sidecar.image:
                    own = imagerefs.parse(sidecar.image)
                    creds = await containerizing.pull_credentials(self.client, self.namespace, spec, own.registry)
                    sidecars[sidecar.name] = await cache.ensure(sidecar.image, credentials=creds, pinned_digest=None)
            argv = containerizing.argv_for(spec, image)
        except imagerefs.InvalidReference as exc:
            return images.ImageError("ImageNotFound", reference, str(exc))
        except (images.ImageError, containerizing.NoCommand) as exc:
            return exc
        how = "cached on this host" if image.cached else f"pulled in {image.pull_seconds:.1f} s"
        await self._report(
            image=containerizing.image_status(image), runtime={"sandbox": self.runtime.name, "image": how}
        )
        return Pulled(image, argv, sidecars)

    async def _report_pull_failure(self, failure: images.ImageError | containerizing.NoCommand | PrepareFailed) -> None:
        if isinstance(failure, PrepareFailed):
            await self._report(
                phase="Failed", reason=failure.reason, message=scrub(str(failure), 2000), finishTime=_now()
            )
        elif isinstance(failure, containerizing.NoCommand):
            await self._report(phase="Failed", reason="Error", message=str(failure), finishTime=_now())
        elif failure.permanent:
            await self._report(
                phase="Failed", reason=failure.reason, message=scrub(str(failure), 2000), finishTime=_now()
            )
        else:
            # The registry's failure, not the Job's: the attempt is lost and replaced.
            await self._report(
                phase="Lost", reason=failure.reason, message=scrub(str(failure), 2000), finishTime=_now()
            )

    async def _join(self, layout: AttemptLayout, argv: list[str]) -> ganging.Joined | meshing.MeshFailed:
        """Meet the gang, or why it could not be met."""
        try:
            return await ganging.join(self.client, self.view, layout, argv, self.host.mesh_host)
        except meshing.MeshFailed as exc:
            return exc

    async def _start(
        self,
        layout: AttemptLayout,
        shipper: LogShipper,
        argv: list[str],
        prepared: Prepared,
        policy: checkpointing.Policy | None,
        gang: ganging.Joined | None,
        pulled: Pulled | None,
    ) -> None:
        attempt = self.view
        spec = attempt.spec
        working_dir, bind_working_dir = containerizing.working_dir_for(spec, pulled.image if pulled else None)
        mounts = tuple(prepared.mounts)
        hook_dir = None
        if pulled is not None and policy is not None and policy.integration == "HFTrainer":
            # The hook is the agent's package: a container sees it only where it is mounted.
            hook_dir = checkpointing.CONTAINER_HOOK_DIR
            mounts += (Mount(checkpointing.HOST_HOOK_DIR, hook_dir, read_only=True),)
        ready: Object = {} if spec.init_command else _inputs_ready(prepared)
        env = {
            **environment(attempt, self.host),
            **prepared.env,
            **checkpointing.environment(self.attempt["spec"], policy, hook_dir=hook_dir),
            **(gang.env if gang is not None else {}),
            "NODUS_PROGRESS_FILE": PROGRESS_FILE,
        }
        container: dict[str, Any] = {}
        if pulled is not None:
            env = containerizing.environment_for(pulled.image, env, spec)
            devices: tuple[str, ...] = ()
            if self.host.cdi is not None and self.host.cdi.devices and self.host.gpu_indexes:
                devices = tuple(self.host.cdi.names_for(self.host.gpu_indexes))
                env.update(gpus.visible_devices_env(self.host.gpu_indexes))
            container = {
                "image": ContainerImage(pulled.image.image_id, pulled.image.pinned),
                "limits": containerizing.limits_for(spec),
                "devices": devices,
                "bind_working_dir": bind_working_dir,
                "host_network": gang is not None,
            }
        base = RunSpec(
            argv=argv,
            env=env,
            working_dir=working_dir,
            layout=layout,
            hidden=self.host.hidden,
            mounts=mounts,
            egress=egress_of(spec, self.host),
            **container,
        )
        init = spec.init_command
        if init and not await self._init(init, base, shipper):
            return None
        sidecars = sidecars_of(spec, env, prepared.sidecar_env)
        if pulled is not None:
            sidecars = tuple(
                _in_image(sidecar, pulled.sidecars.get(sidecar.name), pulled.image) for sidecar in sidecars
            )
        run_spec = dataclasses.replace(base, sidecars=sidecars)
        try:
            self.process = await self.runtime.start(run_spec)
        except Exception as exc:
            reason = "SidecarFailed" if str(exc).startswith("sidecar ") else "Error"
            await self._report(
                phase="Failed", reason=reason, message=scrub(f"Could not start: {exc}"), finishTime=_now()
            )
            return None
        # Without an init command the inputs' report rides on this one: one status write fewer per start.
        await self._report(phase="Running", startTime=_now(), **ready)
        watcher = progress.ProgressFileWatcher(layout.progress, self._report_progress)
        watcher.start()
        pump = asyncio.create_task(self._pump(self.process, shipper))
        stopper = asyncio.create_task(self._stop_when_asked(self.process))
        if self.checkpointer is not None:
            self.checkpointer.process = self.process
            if gang is None:
                self._start_cadence()  # a gang's checkpoints are requested of every rank at once, by the controller
        ended = await self.process.wait()
        await self._end_checkpoints(stopper)
        stopper.cancel()
        await pump
        await watcher.close()
        await shipper.close()
        await self._report_end(ended, layout, prepared)
        return None

    async def _unless_stopped(self, work: Awaitable[T]) -> T | PrepareFailed | None:
        """``work``'s result, its PrepareFailed, or None when a stop was asked for first (work is cancelled)."""
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        stopped = asyncio.create_task(self._stop_requested.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            return None
        try:
            return task.result()
        except PrepareFailed as exc:
            return exc

    async def _report_stopped_early(self) -> None:
        await self._report_terminal(decisions.stopped_early(self.stop), {"finishTime": _now()})

    async def _init(self, init: InitCommand, base: RunSpec, shipper: LogShipper) -> bool:
        """Run ``spec.initCommand`` to its end; False (and the attempt reported) unless it exited 0."""
        timeout = units.parse_duration(init.timeout or "30m").total_seconds()
        tail: deque[str] = deque(maxlen=MESSAGE_LINES)
        try:
            process = await self.runtime.start(dataclasses.replace(base, argv=list(init.command)))
        except Exception as exc:
            await self._report(
                phase="Failed",
                reason="InitFailed",
                message=scrub(f"initCommand could not start: {exc}"),
                finishTime=_now(),
            )
            return False
        self.process = process

        async def pump() -> None:
            async for stream, raw in process.lines():
                line = self._mask(raw)
                shipper.add(stream, line, container=INIT_CONTAINER)
                if line.strip():
                    tail.append(scrub(line))

        pumping = asyncio.create_task(pump())
        stopper = asyncio.create_task(self._stop_when_asked(process))
        try:
            ended = await asyncio.wait_for(process.wait(), timeout)
            timed_out = False
        except TimeoutError:
            ended, timed_out = await process.stop(10.0), True
        stopper.cancel()
        await pumping
        self.process = None
        if ended.succeeded and not timed_out:
            return True
        if ended.stopped and self.stop_reason is not None and not timed_out:
            await self._report_stopped_early()
            return False
        how = f"initCommand timed out after {init.timeout or '30m'}." if timed_out else f"initCommand {ended}."
        lines = list(tail)
        message = how + (" Last log lines:\n" + "\n".join(lines) if lines else "")
        await self._report(
            phase="Failed",
            reason="InitFailed",
            message=message,
            exitCode=ended.code,
            signal=ended.signal,
            finishTime=_now(),
        )
        return False

    def _mask(self, line: str) -> str:
        """``line`` with every pinned Secret value the program might print replaced by ``***``."""
        for value in self._masked:
            if value in line:
                line = line.replace(value, "***")
        return line

    async def _report_progress(self, snapshot: Object) -> None:
        await self._report(**snapshot)

    async def _pump(self, process: Process, shipper: LogShipper) -> None:
        async for stream, raw in process.lines():
            line = self._mask(raw)
            if stream.startswith("sidecar/"):
                _, container, sidecar_stream = stream.split("/", 2)
                shipper.add(sidecar_stream, line, container=container)
                continue
            shipper.add(stream, line)
            if line.strip():
                self._tail.append(scrub(line))

    async def _restore(self, checkpointer: checkpointing.Checkpointer) -> checkpointing.CheckpointError | bool:
        """Restore the attempt's checkpoint, if it has one: True, or the error (never None: that means stopped)."""
        try:
            await checkpointer.restore()
        except checkpointing.CheckpointError as exc:
            return exc
        if checkpointer.restored_from is not None:
            await checkpointer.report()
        return True

    def _start_cadence(self) -> None:
        checkpointer = self.checkpointer
        if checkpointer is None or (self._cadence is not None and not self._cadence.done()):
            return
        self._cadence = asyncio.create_task(checkpointer.run(lambda: self.attempt.get("spec") or {}))

    async def _stop_cadence(self) -> None:
        if self._cadence is not None:
            self._cadence.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cadence
            self._cadence = None

    async def _end_checkpoints(self, stopper: asyncio.Task[None]) -> None:
        """The program ended: no more checkpoints of it, but one taken for a stop finishes (it may have ended
        because the stop signalled it)."""
        if self.checkpointer is not None:
            self.checkpointer.process = None
        await self._stop_cadence()
        for task in list(self._requests):
            task.cancel()

    async def _stop_when_asked(self, process: Process) -> None:
        while True:
            await self._stop_requested.wait()
            plan = decisions.checkpoint_plan(
                self.stop, self.attempt.get("spec") or {}, checkpointed=self.checkpointer is not None
            )
            if plan == "none" or await self._checkpoint_before_stop(plan):
                break
            # Given up (or withdrawn): the program keeps running, with its cadence, until another stop.
            self._start_cadence()
        await process.stop(decisions.grace(self.stop, units.now()))

    async def _checkpoint_before_stop(self, plan: decisions.CheckpointPlan) -> bool:
        """Carry out ``plan`` (attemptdecisions.checkpoint_plan); True to stop now, False to keep running (the
        suspend's checkpoint given up or withdrawn, recorded with attemptdecisions.given_up)."""
        checkpointer = self.checkpointer
        assert checkpointer is not None
        await self._stop_cadence()
        for task in list(self._requests):
            task.cancel()
        if plan == "gang-notice":
            await self._gang_checkpoint_on_notice(checkpointer)
            return True
        if plan == "notice":
            await checkpointer.take(decisions.notice_kind(self.stop), self.stop.deadline)
            return True
        delay = 1.0 * checkpointer.time_scale
        checkpointer.reset_stop_failures()
        while True:
            if self.stop.lost_reason is not None:
                return True  # the host's notice arrived meanwhile: it is not taken back by a withdrawal
            if self.stop.withdrawn:
                self._apply(decisions.given_up(self.stop, abandoned=False))
                return False
            # A gang rank's checkpoint before a stop is its shard of a gang checkpoint: every rank's stop has the same
            # requestedTime, which matches the shards up.
            gang_request = self.stop.requested_time if self.view.spec.gang else None
            if await checkpointer.take("Suspend", self.stop.deadline, request=gang_request):
                if checkpointer.reset_stop_failures():
                    await checkpointer.report()
                return True
            after = decisions.after_failed_checkpoint(self.stop, checkpointer.stop_failures + 1, units.now())
            if after == "stop":
                return True
            failures = checkpointer.count_stop_failure()
            await checkpointer.report()
            if after == "keep-running":
                log.warning("attempt %s: the stop's checkpoint failed %d times; it keeps running", self.name, failures)
                self._apply(decisions.given_up(self.stop, abandoned=True))
                return False
            await asyncio.sleep(delay)
            delay *= 2

    async def _gang_checkpoint_on_notice(self, checkpointer: checkpointing.Checkpointer) -> None:
        """A gang rank's notice is the gang's: a checkpoint of this rank alone would not match the others'. The
        rank reports the notice (``status.gang.notice``), the controller asks every rank for a checkpoint under
        it (``spec.checkpointRequest``, answered by :meth:`update`), and this rank waits for its own shard of it,
        until 80 % of the notice has gone, before its program is stopped."""
        notice = _now()
        await self._report(gang={"notice": notice})
        while self.stop.deadline is None or units.now() < self.stop.deadline:
            if checkpointer.handled(notice):
                return
            await asyncio.sleep(0.1)
        log.warning("attempt %s: the gang checkpoint of the notice %s did not finish in time", self.name, notice)

    async def _report_end(self, ended: Exit, layout: AttemptLayout, prepared: Prepared) -> None:
        base: Object = {"finishTime": _now(), "exitCode": ended.code, "signal": ended.signal}
        placement = self.view.status.placement
        interruptible = placement.interruptible if placement else None
        end = decisions.terminal(self.stop, ended, interruptible)
        if end.collect_outputs:
            try:
                collected = await collecting.collect(self.client, self.view, layout, prepared)
            except PrepareFailed as exc:
                await self._report_terminal(decisions.Terminal("Failed", exc.reason, scrub(str(exc), 2000)), base)
                return
            if collected.outputs:
                base["outputs"] = collected.outputs
            if collected.volumes:
                base["volumes"] = collected.volumes
        await self._report_terminal(end, base)

    async def _report_terminal(self, end: decisions.Terminal, extra: Object) -> None:
        """The terminal report, level-triggered: sent until the API server has it (or the Attempt is gone), never
        given up after a few tries, since the Job waits on it (ADR 0043)."""
        message = self._failure(end.message) if end.with_log_tail else end.message
        await self._report(phase=end.phase, reason=end.reason, message=message, terminal=True, **extra)

    def _failure(self, how: str) -> str:
        lines = list(self._tail)
        return how + (" Last log lines:\n" + "\n".join(lines) if lines else "")

    async def _report(self, *, terminal: bool = False, **changes: Any) -> None:
        """PATCH the Attempt's status with ``changes``. Retried with back-off: ten times for progress, and until it
        lands for a ``terminal`` report (a lost response is harmless: the same patch again changes nothing)."""
        terminal = terminal or changes.get("phase") in phases.ATTEMPT_FINISHED
        patch = {"status": {k: v for k, v in changes.items() if v is not None}}
        delays = itertools.chain((0.2, 0.5, 1, 2, 5), itertools.repeat(10)) if terminal else iter(_PROGRESS_DELAYS)
        for delay in delays:
            try:
                await self.client.patch("attempts", self.name, patch, self.namespace, subresource="status")
                return
            except (errors.NotFound, errors.Forbidden):
                # Deleted with its Job, or no longer this node's to report (the node authorizer checked the
                # bound Attempts afresh before refusing): nothing to tell.
                return
            except Exception as exc:
                log.warning("reporting %s of %s failed (%s); retrying", changes.get("phase"), self.name, exc)
                await asyncio.sleep(delay)
        log.error("could not report %s of %s", changes.get("phase"), self.name)


def _now() -> str:
    return units.format_time(units.now())


def _inputs_ready(prepared: Prepared) -> Object:
    ready: Object = {"inputsReadyTime": _now()}
    if prepared.inputs:
        ready["inputs"] = prepared.inputs
    if prepared.source:
        ready["source"] = prepared.source
    return ready


def _in_image(sidecar: Sidecar, own: images.Image | None, program: images.Image) -> Sidecar:
    """A sidecar in its own image (or the program's), running that image's entrypoint when it sets no command."""
    image = own or program
    argv = sidecar.argv or [*image.entrypoint, *image.cmd]
    return dataclasses.replace(
        sidecar, argv=argv, image=ContainerImage(own.image_id, own.pinned) if own is not None else None
    )
