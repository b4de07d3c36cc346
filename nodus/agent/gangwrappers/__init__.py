"""Programs the agent ships into a gang member's sandbox (under ``/nodus/gang``) to run its launcher.

Each is a standalone script: standard library only, runnable by the Job's own interpreter, importing nothing of
nodus, because the sandbox must not depend on the agent's installation. ``nodus.agent.launchers`` reads their text
with :mod:`importlib.resources` and hands it to the agent as files; this package exists so that they are installed
with nodus, type-checked and linted with it, and importable by their tests.
"""
