"""The keys that find a job by a keyword of its name (``GET /api/v2/jobs?keyword=``), without reading the
history: each job stores ``name_keys``, the prefixes of its name and of each word of it, lowercased, and the
multikey index ``(name_keys, created_ms, _id)`` serves a keyword as one equality, exactly as ``user`` is
served, inside the same newest-first windows as every list (:mod:`shared.db.lists.paging`).

Semantics: a keyword matches a job whose name, or a word of it, *starts with* the keyword, ignoring case.
Words are split at every character that is not a letter or digit (``-``, ``_``, ``.``) and where a
capital starts a camel-case word: ``tf-mnistTrain_v2`` has the words ``tf``, ``mnist``, ``train``, ``v2``
(so ``mnist``, ``train``, ``v2``, ``TF-MN`` match; ``nist`` does not: OpenPAI matched any substring of the
name, user or VC, which no index serves). Prefixes are stored up to
:data:`KEY_CHARS` characters; a longer keyword is found by its first :data:`KEY_CHARS` characters and its
whole text must also be found in the name, among those (:func:`keyword_query`). Only the first :data:`MAX_WORDS`
words are keyed, which bounds a job's keys (a name is at most 255 characters).
"""

from __future__ import annotations

import re
from typing import Any

KEY_CHARS = 24  # the longest prefix stored
MAX_WORDS = 8  # words of a name keyed (after the name itself)
_PART = re.compile(r"[^\W_]+")  # runs of letters and digits
_CAMEL = re.compile(r"[A-Z]+(?![a-z])[0-9]*|[A-Z]?[^\WA-Z_]+")  # HTTPServer2x -> HTTP, Server2x


def words(name: str) -> list[str]:
    """A name's words, in order, as they are keyed (lowercased)."""
    return [w.lower() for part in _PART.findall(name) for w in (_CAMEL.findall(part) or [part])]


def name_keys(name: str) -> list[str]:
    """The keys a job of this name is stored with: every prefix (up to :data:`KEY_CHARS`) of the name and of
    its first :data:`MAX_WORDS` words, lowercased, each once, in a fixed order."""
    keys: dict[str, None] = {}
    for text in (name.lower(), *words(name)[:MAX_WORDS]):
        for end in range(1, min(len(text), KEY_CHARS) + 1):
            keys.setdefault(text[:end])
    return list(keys)


def keyword_query(keyword: str) -> dict[str, Any]:
    """The filter a keyword adds to a list's query: one key of the index, and (for a keyword longer than
    :data:`KEY_CHARS`) its whole text as a prefix of the name or of a word of it."""
    text = keyword.lower()
    query: dict[str, Any] = {"name_keys": text[:KEY_CHARS]}
    if len(text) > KEY_CHARS:
        query["name"] = {"$regex": re.escape(text), "$options": "i"}
    return query
