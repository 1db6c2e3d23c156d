"""The core: what every operation is made of, and the one pipeline that runs it.

Contracts (``errors``, ``records``, ``ops``, ``spec``, ``values``, ``filters``,
``codes``, ``schemas``, ``backend``, ``events``, ``tokens``), the state the
handlers share (``state``), the record and administrative handlers
(``store``, ``admin``) and :class:`~hrm_memory.core.pipeline.Pipeline`. The core
imports no feature package (recall, context, integrations, cli): features are
given the core's state and contribute their handlers to the pipeline.
"""
