"""The file backend: every record in files under one root (``backend.py``).

The warm tier (``warm/``) keeps live records in checksummed JSON logs, one per
bucket of keys; the cold tier (``cold.py``) archives records past their
namespace's warm age; ``locks.py`` serialises writers across processes;
``changes*.py`` are the change log that carries events to other processes, the
file-system watch that wakes their readers, and its scrubbing on erase;
``erase.py`` removes one key from every file.
"""
