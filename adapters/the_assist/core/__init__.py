"""the_assist.core: the storage modules (see docs/adapters.md)."""
