"""Lossless migration of the legacy HRM memory files into one hrm-memory store.

``hrm-memory migrate plan|apply|verify|export|rollback`` (or ``python -m
migration``); see docs/migration.md. Modules: ``layout`` (legacy path ->
record, the contract shared with the adapters), ``formats`` (bytes <-> values
and back), ``anomalies`` (what is flagged), ``inventory`` (the legacy tree),
``manifest`` (what apply imported), ``engine`` (the five operations),
``report`` and ``cli``.
"""
