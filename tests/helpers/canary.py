"""Where a canary's bytes are: every file under a root that holds them."""

from __future__ import annotations

import os
from pathlib import Path


def files_holding(root: Path | str, *needles: bytes) -> list[str]:
    """Paths (relative to ``root``) of the files under ``root`` holding any of ``needles``."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            try:
                data = path.read_bytes()
            except (FileNotFoundError, IsADirectoryError):
                continue  # removed while walking (a temporary file)
            if any(n in data for n in needles):
                found.append(str(path.relative_to(root)))
    return sorted(found)
