"""Status causes the API server gives and its clients branch on (``details.causes[].reason`` of a Status).

The reason of a Status says what kind of failure it is; a cause says which one, where a client must tell
an expected refusal from a real one without reading the message. Written by the server, read by the
controllers, which never import ``nodus.api``: one name, defined here.
"""

from __future__ import annotations

PROJECT_TERMINATING = "ProjectTerminating"
"""A 403 Forbidden creating an object in a project that is being deleted (kube-apiserver's
``NamespaceTerminating``). Nothing new can be made there; the garbage collector deletes what the project holds,
so a controller that meets it has nothing to retry."""
