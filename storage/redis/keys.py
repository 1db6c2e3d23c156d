"""Redis key names of one store, for one server or for a Redis Cluster.

One naming object serves both modes, so the backend has one code path:

- **one server** (``redis://``): the layout it always had, unchanged (data
  written by earlier versions is read as it is): ``<prefix>r:<ns>``,
  ``<prefix>c:<ns>``, ``<prefix>q:<ns>``, ``<prefix>l:<ns>``,
  ``<prefix>w:<ns>``, one change stream ``<prefix>events`` and one set
  ``<prefix>namespaces`` that the write script itself keeps.
- **a cluster** (``redis+cluster://``): every key of a namespace carries the
  hash tag ``{<prefix><ns>}``, so they all live in one slot and every change
  stays one atomic script on one shard: ``{<prefix><ns>}r`` (live), ``c``
  (archive), ``q`` (quarantine), ``l`` (lease), ``w`` (lease waiters),
  ``e`` (the namespace's own change stream) and ``n`` (a one-member set that
  says the namespace holds data). Nothing on the write path is global: the
  store-wide keys ``{<prefix>}namespaces`` (every namespace ever written,
  added once per process and namespace before its first write) and
  ``{<prefix>}decl`` / ``{<prefix>}declgen`` (declarations) are written only
  off it.

Why two layouts and not the tagged one everywhere: a server that already
holds a store in the old layout keeps working with no migration step, and the
single server keeps its one stream (a total order of every change, which a
cluster cannot give). The tag includes the prefix, so two stores that share a
cluster do not share slots by accident.
"""

from __future__ import annotations

from typing import NamedTuple


class NamespaceKeys(NamedTuple):
    live: str
    cold: str
    quarantine: str
    lock: str
    wait: str
    stream: str
    marker: str  # the set the write script adds the namespace to


class KeyLayout:
    """Key names for ``prefix``; ``cluster`` picks the hash-tagged layout."""

    __slots__ = ("prefix", "cluster", "stream", "namespaces", "decl", "declgen")

    def __init__(self, prefix: str, cluster: bool) -> None:
        self.prefix = prefix
        self.cluster = cluster
        meta = "{" + prefix + "}" if cluster else prefix
        #: the one change stream (one server); per namespace on a cluster
        self.stream = "" if cluster else prefix + "events"
        self.namespaces = meta + "namespaces"
        self.decl = meta + "decl"
        self.declgen = meta + "declgen"

    def of(self, namespace: str) -> NamespaceKeys:
        p = self.prefix
        if self.cluster:
            tag = "{" + p + namespace + "}"
            return NamespaceKeys(tag + "r", tag + "c", tag + "q", tag + "l", tag + "w", tag + "e", tag + "n")
        r, c, q, lk, w = (f"{p}{t}:{namespace}" for t in "rcqlw")
        return NamespaceKeys(r, c, q, lk, w, self.stream, self.namespaces)

    def stream_of(self, namespace: str) -> str:
        return self.of(namespace).stream


__all__ = ["KeyLayout", "NamespaceKeys"]
