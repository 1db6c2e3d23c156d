"""Adapter for the legacy ``locked_system`` package: the ``memory`` modules only."""
