"""The ``hrm-memory`` command line: ``main`` (the parser and the record,
namespace, consent and maintenance commands), ``recall`` and ``trace`` (their
commands), ``demo``, ``token_report`` (the ``tokens`` report) and ``textfmt``
(plain-text tables and JSON, shared with the migration report). The console
script is ``hrm_memory.cli.main:main``."""
