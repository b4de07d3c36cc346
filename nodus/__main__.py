"""``python -m nodus``: the same as the ``nodus`` command."""

from nodus.cli.main import main

main()
