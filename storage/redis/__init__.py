"""The Redis backend: one server (``backend.py``) or a Redis Cluster (``cluster.py``).

``url.py`` parses ``redis://`` and ``redis+cluster://`` URLs; ``conn.py``
holds the connection and types its errors; ``keys.py`` names every key under
the store's prefix; ``scripts.py`` the server-side Lua that makes each write
atomic; ``changes.py`` the change stream; ``purge.py`` and ``upkeep.py``
purges and the background tiering.
"""
