"""Instrumentation: one span per operation (``spans``), the SDK fast path
(``sdk``) and ready-made exporter set-ups (``setup``)."""
