"""The ``nodus`` command: the processes (dev, apiserver) and the tools (migrate, ...)."""
