"""The ``kvoffload`` command line: ``main`` is the entry point; each command imports only what it uses.

Modules by job: ``parser`` (arguments), ``entry`` (run, errors and exit codes), ``output``
(JSON and progress), and one per command group: ``hardware``, ``models``, ``kv_predict``,
``validate``, ``measure``, ``book`` (book and run).
"""

from kvoffload.cli.entry import main
from kvoffload.cli.parser import build_parser

__all__ = ["build_parser", "main"]
