"""``locked_system.capabilities``: only note capture is storage (adapted)."""
