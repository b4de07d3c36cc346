"""``GET /serverinfo``: what a client of this server needs to know that is not an object.

It answers any authenticated caller (401 otherwise: the default image may name a private registry):

``{"kind": "ServerInfo", "apiVersion": "nodus.dev/v1", "defaultImage": "<image or "">", "consoleURL": "/console/"}``

``defaultImage`` is ``nodus apiserver --default-image`` (``nodus dev``: its registry's base image). It is
advice to clients, not a server-side default: a Job without ``spec.image`` is still refused, and ``nodus
run`` fills the image in from here so that what is stored says what runs.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import respond
from nodus.api.server import APIServer

CONSOLE_PATH = "/console/"


async def server_info(request: Request) -> Response:
    server: APIServer = request.app.state.server
    await authenticate(server, request)
    return respond(
        {
            "kind": "ServerInfo",
            "apiVersion": "nodus.dev/v1",
            "defaultImage": server.settings.default_image,
            "consoleURL": CONSOLE_PATH,
        }
    )
