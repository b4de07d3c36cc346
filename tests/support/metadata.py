"""An EC2 instance metadata service for tests: IMDSv2 sessions and the spot ``instance-action`` notice.

It answers as EC2's does (``PUT /latest/api/token`` gives a session token; a read without a valid one is 401;
``/latest/meta-data/spot/instance-action`` is 404 until a notice is set, then the notice's JSON), on 127.0.0.1.
"""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class MetadataServer:
    def __init__(self) -> None:
        self.notice: dict[str, str] | None = None
        self.tokens: set[str] = set()
        self.reads = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    self._answer(400)
                    return
                token = secrets.token_urlsafe(16)
                server.tokens.add(token)
                self._answer(200, token.encode())

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") not in server.tokens:
                    self._answer(401)
                    return
                if self.path != "/latest/meta-data/spot/instance-action":
                    self._answer(404)
                    return
                server.reads += 1
                notice = server.notice
                self._answer(404) if notice is None else self._answer(200, json.dumps(notice).encode())

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
