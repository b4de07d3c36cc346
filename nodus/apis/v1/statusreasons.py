"""Reason codes that controllers write into ``status.reason`` (Jobs, Attempts, Nodes), with their fixes.

ADR 0046 §23, §25: every ``status.reason`` is a registered CamelCase code with a docs page and a
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
    "Suspending",
    "The Job is being suspended: its running attempts take a checkpoint (a Checkpointed Job) and stop.",
    "Nothing: the Job reads Suspended once nothing runs, by the time status.message names at the latest. To run on "
    'instead, set spec.state to Running: kubectl patch nj <name> --type merge -p \'{"spec":{"state":"Running"}}\'.',
    "A suspend asks every running attempt to stop; a Checkpointed Job's take a checkpoint first, until 10 minutes "
    "after the suspend (spec.stop.deadline of the Attempt): a checkpoint not committed by then is given up and the "
    "attempt stops without it, so resuming restores the checkpoint before. A checkpoint that fails three times "
    "leaves the Job running (SuspendFailed). Other attempts get SIGTERM, then SIGKILL 30 s later.",
)
_add(
    "Completed",
    "Every index succeeded.",
    "Nothing to fix.",
    "The Job reached status.succeeded == spec.completions.",
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
    "The provider reclaimed the host the attempt ran on.",
    "Nothing: a replacement starts and restores the last checkpoint. Interruptible capacity is reclaimed most often; "
    "spec.placement.interruptible: Never avoids it.",
    "The provider gave notice (interruptible capacity being reclaimed, or an on-demand host taken back, which "
    "nodus sim preempt simulates); the agent took a checkpoint and stopped the attempt before the host went away. "
    "The message says which kind of capacity it was.",
)
_add(
    "BootFailed",
    "The host never came up.",
    "Nothing: the time is Nodus's fault and a replacement starts on other capacity.",
    "A host that fails to boot is lost before the program starts.",
)
_add(
    "CapacityBusy",
    "The provider had no capacity of the chosen offering when the host was asked for.",
    "Nothing: the attempt is placed again and prefers other offerings; widen spec.placement if it keeps waiting.",
    "A real cloud may refuse a host (EC2 InsufficientInstanceCapacity, a spot price or count limit, a vCPU quota). "
    "The Node fails with this reason, its attempt ends Lost at no charge, and the replacement avoids that offering.",
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


# Admission of the data plane (nodus.controllers.jobs.pinning): waiting (Pending) and final reasons.
_WAITS = "The Job stays Pending and is admitted as soon as it appears; nothing runs or is charged meanwhile."
_add(
    "SecretNotFound",
    "A Secret the Job names does not exist yet.",
    "Create the Secret named in the message (kind: Secret, apiVersion: nodus.dev/v1) in the Job's project.",
    "Secrets named by env secretKeyRef, secrets, imagePullSecrets and Connections are pinned at admission. " + _WAITS,
)
_add(
    "SecretKeyNotFound",
    "The pinned Secret version lacks a key the Job reads.",
    "Add the key to the Secret (a new version); the Job pins that version.",
    "env[].valueFrom.secretKeyRef names a key; the Secret version pinned must hold it. " + _WAITS,
)
_add(
    "SecretVersionNotFound",
    "A Secret has no version the Job pins.",
    "Pin an existing version (kubectl get secrets.nodus.dev NAME -o yaml lists them) or leave version unset.",
    "spec.secrets[].version must name one of the Secret's versions; the Job fails at admission otherwise.",
)
_add(
    "SecretVersionConflict",
    "The Job pins two versions of one Secret.",
    "Pin one version of each Secret in spec.secrets, or none.",
    "A Job sees exactly one version of each Secret, in every container and attempt.",
)
_add(
    "SecretChanged",
    "A Secret the Job pinned was deleted (or recreated) before an attempt could read it.",
    "Create the Job again so that it pins the current Secret.",
    "A Secret deleted and recreated under the same name is a different Secret: its values are not the ones the "
    "Job was admitted with, so no attempt reads them.",
)
_add(
    "ConnectionNotFound",
    "A Connection the Job names does not exist yet.",
    "Create the Connection named in the message in the Job's project.",
    "Bucket inputs, output sinks and spec.connections name Connections. " + _WAITS,
)
_add(
    "ConnectionTypeMismatch",
    "A Connection is of the wrong type for its use.",
    "Bucket inputs need an S3 Connection; output sinks a Postgres, Neon or Supabase one.",
    "The Job fails at admission rather than at the end of its run.",
)
_add(
    "GPUsNotOnHost",
    "The attempt was placed on GPUs its host does not have.",
    "Nothing to change in the Job: its next attempt is placed again. If it recurs, the host's Node reports GPUs "
    "(status.gpuIndexes) its agent does not find; restart the agent on that host.",
    "A shared host gives each attempt the GPU ordinals of its placement (status.placement.gpuIndexes); the agent "
    "refuses ordinals the host lacks rather than run the program on devices it was not given.",
)
_add(
    "PoolNotFound",
    "The Pool the Job places on does not exist in its project yet.",
    "A project Owner creates the Pool named in the message and joins hosts to it (nodus pools join-token POOL), or "
    "recreate the Job with another spec.placement.pool.",
    "A Job with placement.pool runs only on the hosts of that Pool of its project; the Pool must exist to admit it. "
    + _WAITS,
)
_add(
    "VolumeNotFound",
    "A Volume the Job mounts or reads does not exist yet.",
    "Create the Volume named in the message (and upload a revision: nodus volumes upload NAME PATH).",
    "Volumes are pinned at admission: a read-only mount or input at a revision. " + _WAITS,
)
_add(
    "VolumeEmpty",
    "A Volume the Job reads has no revision yet.",
    "Upload a revision (nodus volumes upload NAME PATH) or let a Job write one through a writable mount.",
    "A read-only mount or a volume input needs a revision to pin. " + _WAITS,
)
_add(
    "WorkspaceNotFound",
    "A Workspace the Job reads (inputs[].fromWorkspace) does not exist yet.",
    "Create the Workspace named in the message and push a revision (nodus workspaces push NAME DIR).",
    "A fromWorkspace input pins the Workspace's latest revision at admission. " + _WAITS,
)
_add(
    "WorkspaceEmpty",
    "A Workspace the Job reads has no revision yet.",
    "Push a revision (nodus workspaces push NAME DIR, or --from-output JOB/OUTPUT).",
    "A fromWorkspace input needs a revision to pin. " + _WAITS,
)
_add(
    "VolumeRevisionNotFound",
    "A Volume has no revision the Job pins.",
    "Pin an existing revision (its status.revisions lists them) or leave revision unset for the latest.",
    "Revisions are immutable and numbered from 1.",
)
_add(
    "OutputNotReady",
    "An output the Job reads is not committed yet.",
    "Nothing: the Job starts once the producing Job commits the output (an index succeeds).",
    "Inputs of type output name another Job's committed output. " + _WAITS,
)
_add(
    "InputUnavailable",
    "An input can never be materialised: the producing Job ended without that output, or the blob is gone.",
    "Fix the producing Job, or name an output it committed (its status.outputs lists them).",
    "The Job fails at admission, or when an attempt finds the pinned content gone.",
)
_add(
    "InputDigestMismatch",
    "Downloaded content does not have the pinned SHA-256.",
    "Correct spec.inputs[].url.sha256 (or bucket.sha256), or fix the file at its source; the message names both "
    "digests.",
    "Digests are checked at the end of the stream; content with another digest is never shown to the program, and "
    "the Job fails at once rather than retrying a download that would fail the same way.",
)
_add(
    "InputFetchFailed",
    "An input could not be downloaded.",
    "Check that the URL, bucket or Connection in the message is reachable from the node and its credentials work.",
    "A failed download is a failure of the attempt and counts against spec.backoffLimit.",
)
_add(
    "DestinationRefused",
    "The agent refused to connect to an input's URL or bucket endpoint, or the source repository.",
    "Name a public host that the Job's egress policy allows (spec.network.egress); the message names the address "
    "and why it was refused.",
    "The agent never connects on a Job's behalf to its own host (loopback), link-local addresses such as the cloud "
    "metadata service, unix sockets or the control plane's endpoints, and only to hosts the Job's egress policy "
    "allows; a name is checked by every address it resolves to (docs/data-plane.md, Destinations). The Job fails "
    "at once: the same destination would be refused again.",
)
_add(
    "SourceUnavailable",
    "The Job's source could not be checked out.",
    "Check spec.source: the repository and ref must exist and be reachable over https, or the blob be uploaded "
    "(POST .../blobs).",
    "The source is checked out before initCommand; a missing ref or blob fails the Job at once.",
)
_add(
    "ArchiveUnsafe",
    "An archive the Job reads (its source blob, a Volume revision or an output used as an input) was refused.",
    "Rebuild the archive with regular files, directories and links that stay inside it, relative names without .. "
    "(tar -h stores what a link points to), within the bounds the message names; then upload it again and create "
    "the Job again.",
    "The agent unpacks archives member by member and never writes a link that leaves the archive (absolute, or "
    "climbing above its own directory), a hard link, a device, a fifo, an absolute name or a name with a .. "
    "component, nor past 1 TiB or a million members (docs/data-plane.md, Paths and links). The Job fails at once: "
    "the same archive would be refused again.",
)
_add(
    "ImagePullFailed",
    "The node could not pull the Job's image: the registry failed, timed out or could not be reached.",
    "Nothing, usually: the attempt is replaced and pulls again. If it keeps happening, check that the registry in "
    "the message is up and reachable from the nodes.",
    "A registry error (5xx), a timeout or a refused connection is the platform's failure, not the Job's: the agent "
    "retries the pull with backoff, then the attempt ends Lost and is replaced (it counts against "
    "spec.recovery.maxAttempts like other lost capacity, never against spec.backoffLimit). Pull time is Boot time "
    "(docs/data-plane.md, Images).",
)
_add(
    "ImageNotFound",
    "The Job's image does not exist: no such repository, tag or digest in the registry, or no such registry.",
    "Correct spec.image (or spec.imageRef) to an image that exists (skopeo inspect docker://IMAGE tells), push it, "
    "and create the Job again.",
    "The registry answered that the manifest or repository is unknown. The Job fails at once rather than "
    "spec.backoffLimit times: every attempt would pull the same reference.",
)
_add(
    "ImagePullUnauthorized",
    "The registry refused to serve the Job's image with the credentials the Job gave (or without any).",
    "Create a Secret with the registry's credentials (a .dockerconfigjson key, or username and password keys), name "
    "it in spec.imagePullSecrets, and create the Job again. Docker Hub answers this way for a repository that does "
    "not exist too.",
    "Credentials come only from the Job's spec.imagePullSecrets, pinned at admission, never from the node. The Job "
    "fails at once rather than spec.backoffLimit times.",
)
_add(
    "ImageRegistryUntrusted",
    "The image's registry could not be reached over verified TLS: it speaks plain HTTP or its certificate is not "
    "trusted.",
    "Use a registry served over HTTPS with a publicly trusted certificate, or ask the operator to name this one "
    "with nodus agent --insecure-registry HOST:PORT (nodus dev --insecure-registry).",
    "Agents pull over verified TLS only, except from the registries their operator names (as Docker's "
    "insecure-registries). The Job fails at once: every node would refuse the same registry.",
)
_add(
    "EphemeralStorageExceeded",
    "The program wrote more than spec.resources.disk to its ephemeral storage.",
    "Raise spec.resources.disk or write less: /nodus/scratch, /nodus/outputs, /nodus/state, the working directory "
    "and the image's own filesystem (/tmp, /var/tmp, anything the program writes outside a Volume) all count.",
    "The agent measures the attempt's writable directories and its container's writable layer periodically, as "
    "the kubelet does, and kills the attempt once their usage exceeds spec.resources.disk. The attempt fails (a "
    "customer failure, counted against spec.backoffLimit).",
)
_add(
    "InitFailed",
    "spec.initCommand failed or timed out.",
    "Read its log lines in the message and its logs (nodus logs attempt/<name> -c init).",
    "The init command runs before the sidecars and the command; its failure is a customer failure that counts "
    "against spec.backoffLimit.",
)
_add(
    "SidecarFailed",
    "A sidecar did not become ready.",
    "Read the sidecar's logs (nodus logs attempt/<name> -c <sidecar>) and fix its command or startupTimeout.",
    "Sidecars start before the command and must become ready within their startupTimeout; this is a customer "
    "failure that counts against spec.backoffLimit.",
)
_add(
    "OutputCollectionFailed",
    "The program succeeded but an output could not be collected.",
    "Write declared outputs under /nodus/outputs, the working directory or a writable Volume, and check the path "
    "in spec.outputs exists when the program ends.",
    "Outputs are collected when an index succeeds; an output that cannot be collected fails the attempt (a "
    "customer failure, counted against spec.backoffLimit).",
)

_add(
    "OutputPathUnsafe",
    "An output (or a writable Volume) leads through a symbolic link, or is not a regular file or directory.",
    "Write the output file or directory itself at the path spec.outputs names, not a symbolic link to it (links "
    "inside an output directory are kept as links); the message names the path.",
    "The agent reads outputs below the directory behind their mount one component at a time and never follows a "
    "link, so that a program cannot make it upload a file of the host (docs/data-plane.md, Paths and links). A "
    "customer failure, counted against spec.backoffLimit.",
)

_add(
    "InsufficientCredits",
    "The project's available credit does not cover the hold that capacity needs.",
    "An administrator grants credit (nodus credits grant PROJECT AMOUNT), or the project runs less at once.",
    "Before capacity starts, a hold reserves its rate for a funded window plus the minimum charge; the hold must "
    "fit the project's available credit. Until it does, the attempt waits without capacity and nothing is "
    "charged (the Job's Funded condition is False); it starts by itself once credit is granted. The message "
    "names the amounts.",
)
_add(
    "MaxCostReached",
    "The Job has spent (or holds) as much as spec.maxCostUSD allows.",
    "Raise spec.maxCostUSD (it can only be raised); the Job resumes by itself.",
    "maxCostUSD counts everything the Job spends, retries and recoveries included. A hold that would pass it "
    "is refused: a new attempt waits without capacity, and a running one is stopped before its hold runs out "
    "(the Job's Funded condition is False).",
)
_add(
    "BudgetExceeded",
    "A Budget the Job matches has no room for the hold its capacity needs.",
    "Raise spec.limitUSD of the Budget named in the message (kubectl edit budget NAME), wait for its period to "
    "end, or lower the Job's parallelism; the Job resumes by itself.",
    "A Budget limits what the project's Jobs matching its selector may commit per period (Daily, Monthly or Total): "
    "what was charged to them in the period plus what they hold. Every hold and extension must fit every Budget its "
    "Job matches; one that does not is refused: a new attempt waits without capacity, and a running one is stopped "
    "before its hold runs out (the Job's Funded condition is False). The message names the Budget, its limit, what "
    "is committed and what the hold needs; kubectl get budgets shows each Budget's figures.",
)
_add(
    "Interrupted",
    "The Job lost its capacity and spec.recovery.onInterruption is Fail.",
    "Set spec.recovery.onInterruption: Resume (the default) to recover from lost capacity, or "
    "spec.placement.interruptible: Never to avoid reclaimable hosts; then create the Job again.",
    "With onInterruption: Fail a Job fails instead of starting a replacement when an attempt's capacity is "
    "lost (preempted, a node lost, a boot failed). The message names the attempt and why it was lost.",
)
_add(
    "SuspendFailed",
    "A suspend could not checkpoint the Job, so it keeps running.",
    "Read status.message for why the checkpoint failed (kubectl get attempts -l nodus.dev/job=JOB -o yaml shows "
    "status.checkpoint.lastFailure); fix it, then set spec.state to Running and to Suspended again, or cancel.",
    "Suspending a Checkpointed Job takes a checkpoint before stopping it. A checkpoint that fails is tried twice "
    "more; after the third failure the Job keeps running (stopping it would lose its progress) with "
    "status.suspendFailures counting the failures and the SuspendFailed condition True.",
)
_add(
    "RestoreFailed",
    "The attempt could not restore the Job's latest checkpoint.",
    "Nothing, usually: a replacement tries again while spec.recovery.maxAttempts allows. If it keeps failing, "
    "the message says which part is missing or damaged.",
    "A replacement attempt restores the latest committed checkpoint before the program starts, checking every "
    "part's SHA-256. When a part cannot be read or does not match, the attempt ends Lost with this reason.",
)
_add(
    "CheckpointPathInvalid",
    "A spec.recovery.checkpoint.paths entry is not on a directory that outlives the program.",
    "Keep checkpoint paths under /nodus/state (the default), the working directory or a writable Volume.",
    "Checkpoints copy the files under each path after the program wrote them; a path on the sandbox's own "
    "filesystem (/tmp) disappears with the program and cannot be checkpointed.",
)
_add(
    "CheckpointPathUnsafe",
    "A checkpoint path is, or lies below, a symbolic link (or is not a directory) on the host.",
    "Make every spec.recovery.checkpoint.paths entry a real directory: do not replace /nodus/state, the working "
    "directory or a Volume's directory with a link.",
    "The agent reads checkpoint paths one component at a time without following symbolic links, so that a link "
    "the program leaves cannot make it copy host files into a checkpoint (ADR 0031). The checkpoint is not taken; "
    "the program keeps running and the next checkpoint tries again.",
)
_add(
    "GangAssemblyFailed",
    "The gang's members did not all come up and mesh, more times in a row than distributed.maxAssemblyRetries allows.",
    "Read the message for the ranks that never came and how far each got; choose other capacity "
    "(spec.placement.offerings, a wider distributed.network) or raise distributed.startupTimeout.",
    "Every member must boot, register and probe its peers within distributed.startupTimeout; an assembly that "
    "does not finish in time (or loses a member on the way) releases every member and is placed again, up to "
    "maxAssemblyRetries times. Charges for the tries are bounded by status.estimate.assemblyBoundUSD.",
)
_add(
    "AssemblyTimeout",
    "The gang's members did not all start within distributed.startupTimeout.",
    "Nothing, usually: the gang is placed again while distributed.maxAssemblyRetries allows.",
    "An attempt stopped with this reason belonged to a gang epoch that did not assemble in time.",
)
_add(
    "AssemblyFailed",
    "A gang member was lost, or could not mesh with its peers, before the gang assembled.",
    "Nothing, usually: the gang is placed again while distributed.maxAssemblyRetries allows.",
    "A member lost during assembly (a failed boot, a peer it could not reach, a path the transport refuses) ends "
    "the epoch's assembly; every member is released and the gang is placed again.",
)
_add(
    "GangRestart",
    "Another rank of the gang ended, so this rank was stopped to restart the gang together.",
    "Nothing: the gang restarts as a new epoch from its latest gang checkpoint.",
    "A gang runs and restarts as one: when a rank is lost or fails, the others are stopped and every rank starts "
    "again in a new epoch (status.gang.epoch). Losses count against spec.recovery.maxAttempts.",
)
_add(
    "GangComplete",
    "Rank 0 of a Ray-led gang succeeded, so the other ranks (its workers) were stopped.",
    "Nothing.",
    "With launcher Ray or Verl the command runs on rank 0 only; the other ranks serve it and are stopped when it "
    "is done.",
)
_add(
    "MeshFailed",
    "A gang member could not reach its peers' mesh endpoints.",
    "Nothing, usually: the gang is placed again while distributed.maxAssemblyRetries allows. If it repeats, "
    "check status.gang.members[].path and the attempts' status.gang.failure.",
    "Before the command starts, every rank registers an endpoint and probes its peers' round trip and bandwidth; a "
    "rank that cannot reach a peer ends Lost with this reason and the assembly is tried again.",
)
