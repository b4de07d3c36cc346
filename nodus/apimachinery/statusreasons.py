"""Reason codes that controllers write into ``status.reason`` (Jobs, Attempts, Nodes), with their fixes.

DECISIONS 23 and 25: every ``status.reason`` is a registered CamelCase code with a docs page and a
fix. The API server registers these beside its error reasons (``nodus.api.reasons``) and serves their
pages; controllers, which never import ``nodus.api``, read the fix they copy into ``status.fix``
from here. One table, two readers, so a code cannot be written without its page existing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StatusReason:
    code: str
    summary: str
    fix: str
    explanation: str


_ALL: dict[str, StatusReason] = {}


def _add(code: str, summary: str, fix: str, explanation: str) -> None:
    _ALL[code] = StatusReason(code, summary, fix, explanation)


def get(code: str) -> StatusReason:
    """The status reason ``code``; KeyError for an unknown one (a programming error)."""
    return _ALL[code]


def all_status_reasons() -> list[StatusReason]:
    return sorted(_ALL.values(), key=lambda r: r.code)


_add(
    "Unschedulable",
    "No offering fits the Job right now; it waits in the queue.",
    "Read status.message for what each offering lacks, then widen spec.resources.gpu.type, spec.placement.regions, "
    "spec.placement.maxRateUSDPerHour or spec.placement.interruptible, or wait for capacity.",
    "The scheduler filters every offering by the Job's resources and placement. When none fits, or every fitting "
    "one is full, the Job stays Queued and the message lists the reasons by filter with counts.",
)
_add(
    "CapacityUnavailable",
    "The Job waited longer than spec.placement.queueTimeout for capacity.",
    "Relax the placement constraints named in the message, raise spec.placement.queueTimeout (0s waits forever) "
    "and create the Job again.",
    "queueTimeout counts from admission to the first Provisioning. When it expires the Job fails and releases "
    "everything it held.",
)
_add(
    "BackoffLimitExceeded",
    "Attempts failed more often than spec.backoffLimit allows.",
    "Read the failing attempt's logs (nodus logs job/<name> --index <i> --attempt <n>), fix the program, and "
    "create the Job again; raise spec.backoffLimit if failures are expected.",
    "A customer failure (non-zero exit, OOM kill) adds one to status.failed; a new attempt starts while failed "
    "is at most backoffLimit, counted over all indexes.",
)
_add(
    "RecoveryExhausted",
    "An index lost its capacity more often than spec.recovery.maxAttempts allows.",
    "Raise spec.recovery.maxAttempts, or prefer non-interruptible capacity (spec.placement.interruptible: Never).",
    "Lost capacity (preemption, a lost node, a failed boot) starts a replacement while the index has used fewer "
    "than recovery.maxAttempts attempts ended by lost capacity.",
)
_add(
    "DeadlineExceeded",
    "The Job ran longer than spec.timeout.",
    "Raise spec.timeout (it may be edited while the Job runs) or make the program finish sooner.",
    "The timeout clock starts at the first Provisioning and excludes time spent Suspended; status.timeoutTime "
    "shows when it fires.",
)
_add(
    "Cancelled",
    "The Job was cancelled (spec.state: Cancelled).",
    "Create a new Job to run the work again; cancelling is final.",
    "Cancelling stops every running attempt (SIGTERM, then SIGKILL after the grace period) and ends the Job.",
)
_add(
    "Suspended",
    "The Job is suspended (spec.state: Suspended).",
    'Set spec.state to Running to resume: kubectl patch nj <name> --type merge -p \'{"spec":{"state":"Running"}}\'.',
    "Suspending stops every running attempt; resuming starts new attempts for the unfinished indexes. Time spent "
    "suspended does not count toward spec.timeout.",
)
_add(
    "Completed",
    "Every index succeeded.",
    "Nothing to fix.",
    "The Job reached status.succeeded == spec.completions.",
)
_add(
    "NotYetSupported",
    "The Job uses a field this Nodus release does not run yet.",
    "Remove the fields named in the message, or wait for the release that runs them.",
    "Fields of the data plane (inputs, secrets, volumes, source, init command, sidecars, connections), gangs "
    "(distributed) and pools are accepted by the API but not run yet, so a Job using them would run wrongly; it "
    "fails at admission instead, before anything starts.",
)
_add(
    "Error",
    "The program exited with a non-zero status.",
    "Read the attempt's log lines in the message and its logs (nodus logs attempt/<name>).",
    "A non-zero exit is a customer failure: it counts against spec.backoffLimit.",
)
_add(
    "OOMKilled",
    "The program was killed for using too much memory.",
    "Lower the program's memory use or ask for a larger host (spec.resources.memory).",
    "A SIGKILL that Nodus did not send is the kernel's out-of-memory killer. It counts against spec.backoffLimit.",
)
_add(
    "NodeLost",
    "The host running the attempt stopped sending heartbeats.",
    "Nothing: the Job controller starts a replacement while spec.recovery.maxAttempts allows.",
    "A node whose heartbeat lapses is lost; its running attempts end Lost and are replaced.",
)
_add(
    "Preempted",
    "The cloud reclaimed interruptible capacity.",
    "Nothing: a replacement starts; use spec.placement.interruptible: Never to avoid reclaimable capacity.",
    "The provider gave notice; the agent stopped the attempt before the host went away.",
)
_add(
    "BootFailed",
    "The host never came up.",
    "Nothing: the time is Nodus's fault and a replacement starts on other capacity.",
    "A host that fails to boot is lost before the program starts.",
)
_add(
    "HeartbeatLapsed",
    "The node agent stopped sending heartbeats.",
    "Check the agent's host; a new host replaces it for new work.",
    "The node lifecycle controller marks a node Lost when no heartbeat arrived within the grace period.",
)
_add(
    "Stopped",
    "The attempt was stopped on request.",
    "Nothing.",
    "Suspend, cancel, restart and delete stop attempts with SIGTERM, then SIGKILL after the grace period.",
)
