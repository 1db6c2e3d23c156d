"""Encryption at rest for consent-gated namespaces, on any backend.

``backend.py`` wraps a backend and seals values with AES-GCM under a data key
per consent category; ``keys.py`` keeps those keys apart from the store (a key
file, or the environment) and destroys a category's key to shred its data;
``wrap.py`` wraps those keys under a passphrase for an export that carries them.
"""

from .backend import SealedBackend
from .keys import EnvKeys, FileKeys
from .wrap import Passphrase

__all__ = ["EnvKeys", "FileKeys", "Passphrase", "SealedBackend"]
