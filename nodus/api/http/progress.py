"""A Job's progress history over HTTP, for plots (the console's Job page; ADR 0054).

``GET /apis/nodus.dev/v1/namespaces/{project}/jobs/{name}/progress`` answers a ``JobProgressHistory``
(:mod:`nodus.api.progresshistory`)::

    {"kind": "JobProgressHistory", "apiVersion": "nodus.dev/v1", "job": "train",
     "samples": [{"time": "2026-12-03T10:00:01.123456Z", "completed": 120, "total": 1000,
                  "metrics": {"loss": "0.25"}, "costUSD": "0.04"}, ...]}

Whoever may read the Job may read its history: the server's authorizer is asked for ``get`` on
``jobs/progress`` of that Job, as for its outputs (a project Viewer, administrators, the controllers). A Job
that does not exist is a 404 Status; one without samples yet has an empty list.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from nodus.api import progresshistory
from nodus.api.errors import method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import respond
from nodus.api.server import APIServer

_SUBRESOURCE = "progress"


async def job_progress(request: Request) -> Response:
    """``GET /apis/nodus.dev/v1/namespaces/{namespace}/jobs/{name}/progress``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    jobs = server.registry.by_plural("jobs")
    assert jobs is not None
    if request.method != "GET":
        raise method_not_allowed(request.method.lower(), f"{jobs.plural}/{_SUBRESOURCE}")
    request.scope["state"]["metrics"] = ("get", f"{jobs.plural}/{_SUBRESOURCE}")
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    await server.authorizer.authorize(principal, "get", jobs, namespace, name, _SUBRESOURCE)
    job = await server.stores[jobs.plural].get(namespace, name)
    return respond(await progresshistory.history(server.storage, job))
