"""The directory the agent puts first on the program's ``PYTHONPATH`` for ``integration: HFTrainer``.

It holds ``sitecustomize.py``, which Python imports at start-up and which makes a Hugging Face Trainer take part in
the checkpoint protocol. Nothing in nodus imports it; this file only makes the directory a package, so that it is
installed with nodus and type-checked with it.
"""
