"""Names made from job and user names that must fit a file system's or an engine's limit on one name.

The protocol accepts a ``jobName`` of 255 characters and a user name of 64 (shared/jobconfig/model.py,
services/submit/users.py), so ``<user>~<jobName>`` reaches 320 bytes: more than Linux allows one file
name (``NAME_MAX``, 255 bytes, whatever the characters' encoding). A name that fits is kept as it is (so
everything named before keeps its name); a longer one becomes its first bytes, cut on a character
boundary, then ``-`` and 8 hex digits of the whole name's SHA-256: readable, the same every time, and
two long names that share their beginning still differ.
"""

from __future__ import annotations

import hashlib

NAME_MAX = 255  # bytes in one file name (Linux, and every file system Docker stores containers on)
DIGEST_CHARS = 8


def fitted(name: str, max_bytes: int = NAME_MAX) -> str:
    """``name`` if its UTF-8 encoding has at most ``max_bytes`` bytes, else its bounded form (above)."""
    encoded = name.encode()
    if len(encoded) <= max_bytes:
        return name
    if max_bytes <= DIGEST_CHARS + 1:
        raise ValueError(f"no name fits in {max_bytes} bytes with its digest")
    digest = hashlib.sha256(encoded).hexdigest()[:DIGEST_CHARS]
    head = encoded[:max_bytes - DIGEST_CHARS - 1].decode(errors="ignore")  # never half a character
    return f"{head}-{digest}"
