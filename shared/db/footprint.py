"""How much the embedded database holds against the cache it is given (issue 37: no cliff).

SecantusDB (WiredTiger underneath) slows to a stall once what it stores outgrows its cache: with 256 MB,
about 60,000 stored jobs filled it and every operation then waited in cache eviction for minutes; with 1 GB
the stall came at 71,000-81,000 jobs (979 MB on disk). So ``paiq up`` sizes the cache from the machine
(:func:`auto_cache_mb`: a quarter of the memory, or of the container's limit, at least 1 GB, at most 16 GB,
unless ``PAIQ_EMBEDDED_DB_CACHE`` says), reports what is stored on disk against it (``paiq_embedded_db_*``
metrics, the alert ``PaiqEmbeddedDatabaseOutgrowsCache``), and warns at start once it is past
:data:`WARN_SHARE` of it. What is on disk (data, indexes, the server's own oplog and WiredTiger's journal) is
an upper bound of what must be hot, and costs a directory listing to know.
"""

from __future__ import annotations

import os
from pathlib import Path

MB = 1024 * 1024
MIN_AUTO_MB = 1024
MAX_AUTO_MB = 16 * 1024
AUTO = "AUTO"
WARN_SHARE = 0.7  # warn at start, and alert, past this share of the cache


def auto_cache_mb(memory_bytes: int) -> int:
    """The cache ``paiq up`` gives its database on a machine with ``memory_bytes`` of RAM (pure)."""
    return max(MIN_AUTO_MB, min(MAX_AUTO_MB, memory_bytes // 4 // MB))


CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def machine_memory_bytes(limits: tuple[Path, ...] = CGROUP_LIMITS) -> int:
    """The machine's memory, or the container's limit where it is lower (cgroup v2, then v1)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in limits:
        try:
            limit = path.read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            memory = min(memory, int(limit))
    return memory


def resolve_cache_size(setting: str, memory_bytes: int | None = None) -> str:
    """The server's ``--cache-size`` for the setting (``AUTO``, or a size like ``512M``/``2G``)."""
    if setting != AUTO:
        return setting
    return f"{auto_cache_mb(machine_memory_bytes() if memory_bytes is None else memory_bytes)}M"


def size_bytes(size: str) -> int:
    """``"512M"`` -> bytes (pure)."""
    return int(size[:-1]) * (1024 if size.endswith("G") else 1) * MB


def disk_bytes(directory: Path) -> int:
    """What the files under ``directory`` take (a listing: a few hundred files, whatever they hold)."""
    total = 0
    stack = [directory]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def outgrowing(stored: int, cache: int) -> str | None:
    """What to tell the operator when ``stored`` bytes are past :data:`WARN_SHARE` of ``cache`` (pure)."""
    if cache <= 0 or stored <= WARN_SHARE * cache:
        return None
    return (f"the embedded database holds {stored // MB:,} MB on disk, {stored / cache:.0%} of its {cache // MB:,} MB "
            "cache: past the cache every call stalls in eviction. Give it more (PAIQ_EMBEDDED_DB_CACHE), keep less "
            "(PAIQ_JOB_RETENTION_DAYS), or move to a MongoDB replica set (PAIQ_MONGODB_URI)")
