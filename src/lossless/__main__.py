"""``python -m lossless``: the ``lossless`` command."""

from .cli.main import main

main()
