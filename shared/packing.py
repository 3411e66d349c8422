"""A big job's bulky document parts (its two configs, its task records) packed in one binary field each.

Why: the embedded SecantusDB decodes a whole document into Python objects for every operation that
touches it, projections included (a list's window, the queue's priority projection, an update), holding
the interpreter's lock meanwhile. The largest job paiq accepts (4,490 tasks, 1 MB of ``extras``) is a
3 MB document of some 60,000 BSON values: tens of milliseconds of the server's only core for each read,
and a list or a job's detail waited seconds behind a burst of them (issue 24; tests/benchmarks/
worst_job.py). Packed, each part is a ``bytes`` value (BSON binary) of zlib-compressed JSON, which the
server copies without looking inside; paiq decodes it (:meth:`shared.records.JobRecord.from_document`).

Only what no query reads is packed: ``config``, ``raw_config`` and ``tasks`` (no filter, sort or index
looks inside them; every field that one does stays plain). The queue's one projection into the config,
the priority class, is kept beside the packed configs as a stub ``config`` holding that class alone
(:func:`shared.records.config_stub`). The validated config's top-level fields that are exactly as
submitted (``extras``: up to a megabyte) are packed once, in the raw config (:func:`configs_once`).

A part is packed only when it is large (``PACK_MIN_BYTES`` of JSON) and its blob, with what stays plain
beside it, is no larger than the part as BSON, so a packed document is never larger than its plain form
and the bound on a job document (:mod:`shared.admission.docsize`) holds for both. The proof is cheap when the blob
is at most a sixth of the JSON text (JSON text is at most six times the part's BSON: each byte of a string
at most a 6-byte ``\\u00XX`` escape, every other value and key within the same factor of its BSON
element), which is what task records and repetitive configs give; otherwise (random text, which zlib
shrinks by a quarter) the part's BSON size is computed (~9 ms for 2 MB of configs) and compared. Only a
part that zlib cannot shrink below its BSON stays plain.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

PACK_MIN_BYTES = 16 * 1024  # JSON text of a part: below this it stays plain (a job of up to ~60 tasks)
ZLIB_JSON = b"\x01"  # a blob's first byte: its format (zlib-compressed UTF-8 JSON)
STUB_ALLOWANCE = 256  # what is kept plain beside a packed part (the config stub, the field's own bytes)
LEVEL = 1  # zlib's fastest: ~2 ms for a MB of task records, which still shrink 40-60x


class PackingError(ValueError):
    """A packed part this version cannot read (an unknown format byte, or damaged)."""


def pack(text: bytes, bson_size: Callable[[], int]) -> bytes | None:
    """``text`` (a part as JSON) packed, or None where it stays plain: small, or no smaller packed than
    ``bson_size()`` (the part's size as BSON, asked only when the blob is over a sixth of the text)."""
    if len(text) < PACK_MIN_BYTES:
        return None
    blob = ZLIB_JSON + zlib.compress(text, LEVEL)
    room = len(blob) + STUB_ALLOWANCE
    return blob if room <= len(text) // 6 or room <= bson_size() else None


def unpack(blob: bytes) -> bytes:
    """The JSON text of a packed part."""
    if blob[:1] != ZLIB_JSON:
        raise PackingError(f"a packed job part of an unknown format {blob[:1]!r}")
    try:
        return zlib.decompress(blob[1:])
    except zlib.error as e:
        raise PackingError(f"a packed job part is damaged: {e}") from e


AS_SUBMITTED = "as_submitted"  # packed configs: the config's top-level fields stored once, as the raw config's


def configs_once(plain: dict[str, Any]) -> dict[str, Any]:
    """The two configs with each top-level field the validated config keeps exactly as submitted (``extras``:
    up to a megabyte of free-form JSON) written once, in the raw config (zlib's window, 32 KB, does not
    reach back a megabyte to find the copy)."""
    config, raw = plain["config"], plain["raw_config"]
    same = [key for key, value in config.items() if key in raw and _same_json(value, raw[key])]
    if not same:
        return plain
    return {"config": {k: v for k, v in config.items() if k not in same}, "raw_config": raw, AS_SUBMITTED: same}


def configs_whole(parts: dict[str, Any]) -> dict[str, Any]:
    """The two configs as :func:`configs_once` wrote them, the validated one whole again."""
    same = parts.pop(AS_SUBMITTED, [])
    raw = parts["raw_config"]
    parts["config"] = {**parts["config"], **{key: raw[key] for key in same}}
    return parts


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON, types included (Python's ``==`` holds ``1 == 1.0 == True``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
