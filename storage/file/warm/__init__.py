"""The warm tier: live records as checksummed JSON log lines, one log per bucket.

``tier.py`` is the tier (read, write, scan); ``files.py`` one namespace's logs
and their in-memory index; ``format.py`` the line format; ``buckets.py`` the
persisted bucket index; ``notes.py`` the per-namespace notes; ``bulk.py``
batched writes; ``upkeep.py`` compaction and archiving; ``check.py`` the
integrity check and its repairs.
"""
