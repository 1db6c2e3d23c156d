"""Top-level package of hrm-memory; the core lives in :mod:`hrm_memory`."""
