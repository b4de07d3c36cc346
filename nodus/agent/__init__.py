"""``nodus agent``: runs the attempts bound to one node.

The local runtime lives in :mod:`nodus.agent.runtime` (interface, exit model, ``select_runtime``),
with the sandbox in :mod:`nodus.agent.bubblewrap`, the explicit no-sandbox fallback in
:mod:`nodus.agent.unsandboxed` and each attempt's directories in :mod:`nodus.agent.layout`.
The agent is an API client: it never imports ``nodus.api`` or ``nodus.storage``.
"""
