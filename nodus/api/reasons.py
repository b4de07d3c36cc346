"""The registry of reason codes: every ``Status.reason`` and ``status.reason`` the server emits.

Each code has its HTTP status, a one-line summary, a default fix and a docs page that this server
serves itself at ``/docs/reasons/<Code>`` (the ``docs`` extension of every error points there).
A code that is not registered here cannot be raised: ``reason()`` fails loudly in tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodus.apis.v1 import statusreasons


@dataclass(frozen=True)
class Reason:
    code: str
    http_status: int
    summary: str
    fix: str
    explanation: str


_REASONS: dict[str, Reason] = {}


def _register(code: str, http_status: int, summary: str, fix: str, explanation: str) -> None:
    _REASONS[code] = Reason(code, http_status, summary, fix, explanation)


def reason(code: str) -> Reason:
    """The registered reason ``code``; KeyError for an unregistered one (a programming error)."""
    return _REASONS[code]


def all_reasons() -> list[Reason]:
    return sorted(_REASONS.values(), key=lambda r: r.code)


_register(
    "BadRequest",
    400,
    "The request is malformed.",
    "Fix the request as the message says; `kubectl explain <kind>` shows the schema.",
    "The body could not be decoded, a query parameter has an invalid value, or the request combines "
    "options that cannot go together (for example `continue` with `resourceVersion`).",
)
_register(
    "Unauthorized",
    401,
    "The request carries no valid credentials.",
    "Send `Authorization: Bearer <token>` with a token from the server's token file, or use the kubeconfig "
    "that `nodus dev` writes (`export KUBECONFIG=<data-dir>/kubeconfig`).",
    "Every request except health, version and docs must be authenticated, with a bearer token or, behind "
    "kube-apiserver aggregation, with the requestheader front-proxy certificate.",
)
_register(
    "Forbidden",
    403,
    "The caller may not do this.",
    "Ask an Owner of the project to add you to `spec.members` with a role that allows the verb "
    "(Viewer: get, list, watch; Editor: also create, update, patch, delete; Owner: also manage members).",
    "Authorisation is per project. The message names the user, the verb, the resource and the project. Creating "
    "anything in a project that is being deleted is refused too, with the cause ProjectTerminating in "
    "details.causes: wait until the project is gone.",
)
_register(
    "NotFound",
    404,
    "The object or resource does not exist.",
    "Check the name and the project (`-n <project>`); `kubectl get <resource> -A` lists what you can see.",
    "No object of that kind has that name in that project, or the path names no resource.",
)
_register(
    "AlreadyExists",
    409,
    "An object with this name exists already.",
    "Choose another name, use `metadata.generateName`, or update the existing object (`kubectl apply`).",
    "Names are unique per kind and project.",
)
_register(
    "Conflict",
    409,
    "The object changed since you read it, or another field manager owns a field you set.",
    "Read the object again and retry with its current `metadata.resourceVersion`; for a server-side apply "
    "conflict, change the value back or re-run with `--force-conflicts` to take ownership.",
    "Updates use optimistic concurrency: a write that names a stale resourceVersion is refused so that no "
    "update is lost. Server-side apply refuses to overwrite a field another manager set to another value.",
)
_register(
    "Invalid",
    422,
    "The object does not satisfy the schema.",
    "Fix every field listed in `details.causes`; `kubectl explain <kind>.<field>` describes each one.",
    "All validation errors of one request are returned together, each naming its field path.",
)
_register(
    "Gone",
    410,
    "The resource is no longer available.",
    "Start again from a fresh list.",
    "The requested resource version is no longer served.",
)
_register(
    "Expired",
    410,
    "The resourceVersion or continue token is older than the watch log's retention window.",
    "List again without `resourceVersion` (or without `continue`) and watch from the new list's "
    "resourceVersion. The window is set by `--watch-retention` (default 15m).",
    "The watch log keeps every change for a configurable window. A watch from, or a continue token of, a "
    "resourceVersion older than that window cannot be served consistently, so it is refused.",
)
_register(
    "MethodNotAllowed",
    405,
    "This resource does not support that verb.",
    "Use one of the verbs that `kubectl api-resources -o wide` lists for the resource.",
    "Some resources are read-only through the API (written by controllers) or lack a verb.",
)
_register(
    "NotAcceptable",
    406,
    "The server cannot produce the representation the Accept header asks for.",
    "Accept `application/json` (optionally `;as=Table;g=meta.k8s.io;v=v1`) or `application/yaml`.",
    "Responses are JSON, YAML, or a meta.k8s.io/v1 Table.",
)
_register(
    "UnsupportedMediaType",
    415,
    "The request body's content type is not supported for this verb.",
    "Use `application/merge-patch+json` (kubectl patch --type merge), `application/json-patch+json` "
    "(--type json) or server-side apply (`application/apply-patch+yaml`, kubectl apply --server-side).",
    "Strategic merge patch needs Go struct tags that custom kinds do not have, as for CustomResources.",
)
_register(
    "RequestEntityTooLarge",
    413,
    "The request body is too large.",
    "Keep objects under 3 MiB; store large data in a Volume or an uploaded blob.",
    "Objects are kept whole in the database and in every watch event, so their size is capped.",
)
_register(
    "BlobTooLarge",
    413,
    "The uploaded blob is larger than the largest blob the server stores.",
    "Split the data into several blobs (one Volume revision or output per part), or ask an administrator to "
    "raise `nodus apiserver --max-blob-size` (default 64Gi).",
    "Every upload of bytes (a blob, a Volume revision, a Job output or a checkpoint chunk) is bounded by "
    "`--max-blob-size`. A `Content-Length` over it is refused before the body is read; a body without one is "
    "refused the moment it passes the limit, and the server reads no further. Nothing is stored either way.",
)
_register(
    "StorageQuotaExceeded",
    403,
    "The upload would take the project past its storage quota.",
    "Delete the Jobs and Volumes whose outputs, checkpoints and revisions the project no longer needs (a blob "
    "nothing names is deleted after the grace period, `--blob-grace-period`, default 24h), or ask an "
    "administrator to raise `nodus apiserver --project-storage-quota` (default 1Ti).",
    "A project may store `--project-storage-quota` bytes of blobs, each digest counted once however often it "
    "was uploaded; `status.storage.bytes` of the Project shows what it stores. An upload that would pass the "
    "quota is refused before it is read (from its `Content-Length`), as soon as the body passes what is left, "
    "or when it is registered (two uploads racing for the last bytes are decided one after the other). Bytes "
    "the project already holds take no quota. Nothing is stored when an upload is refused.",
)
_register(
    "TooManyRequests",
    429,
    "The caller has as many watches or followed logs open on this API server as one user may.",
    "Close streams you no longer need and retry after the Retry-After seconds; an operator may raise "
    "--max-watches-per-user or --max-log-follows-per-user.",
    "Each watch and each followed log holds a connection and memory for as long as it lasts, so an API server "
    "process lets one user hold only so many at once (default 100 watches and 20 followed logs). The message names "
    "the cap. Administrators (system:masters) are exempt.",
)
_register(
    "Timeout",
    504,
    "The request did not complete in time.",
    "Retry; if it keeps happening, check the server's health (`/readyz`).",
    "The server gave up waiting.",
)
_register(
    "TooLargeResourceVersion",
    504,
    "The resourceVersion is newer than anything this server has seen.",
    "Retry in a moment, or list without `resourceVersion`.",
    "A resourceVersion from the future usually comes from another server that is ahead; retrying lets this "
    "one catch up.",
)
_register(
    "InternalError",
    500,
    "The server failed unexpectedly.",
    "Retry; if it persists, report the `requestId` of the response: the server log has the details.",
    "Nothing about the failure is shown to the client beyond the request id, which the log records.",
)
_register(
    "ServiceUnavailable",
    503,
    "The server cannot serve the request now (the database may be unreachable).",
    "Retry after the number of seconds in `details.retryAfterSeconds`; check `/readyz`.",
    "The request was not applied.",
)
_register(
    "FieldManagerConflict",
    409,
    "Server-side apply found fields owned by another manager with other values.",
    "Re-apply with the other manager's values, or use `kubectl apply --server-side --force-conflicts`.",
    "Each conflicting field is listed in `details.causes` with the manager that owns it.",
)

_register(
    "MaxCostBelowHold",
    402,
    "The Job's spec.maxCostUSD is below the first hold its capacity needs, so it could never start.",
    "Raise spec.maxCostUSD to at least the hold the message names, or choose cheaper capacity.",
    "Before capacity starts, a hold reserves its rate for a funded window plus the minimum charge, and the hold "
    "must fit the Job's own cap. A dry run (?dryRun=All) shows the hold in status.estimate.holdUSD.",
)
_register(
    "EstimateMismatch",
    412,
    "If-Match on a create is not the ETag of a dry run of this Job spec in this project.",
    "Send the ETag of a dry run (?dryRun=All) of exactly this spec, or create without If-Match.",
    "A create with If-Match is bound to the estimate of that dry run: it stores it and is never placed above "
    "its rate plus 10 %. The ETag is sealed by the API servers' secret keys and carries the spec it estimated.",
)
for _money in ("InsufficientCredits", "MaxCostReached", "BudgetExceeded"):
    _entry = statusreasons.get(_money)
    _register(_money, 402, _entry.summary, _entry.fix, _entry.explanation)

# The reasons controllers write into ``status.reason`` (Jobs, Attempts, Nodes). They are not HTTP
# errors (status 0 here); the table lives in ``nodus.apis.v1.statusreasons`` so that controllers,
# which never import the API server, write exactly the codes whose pages it serves.
for _status_reason in statusreasons.all_status_reasons():
    if _status_reason.code not in _REASONS:
        _register(_status_reason.code, 0, _status_reason.summary, _status_reason.fix, _status_reason.explanation)
