"""The embedded database's cache from the machine, and what it holds against it (shared.db.footprint)."""

from __future__ import annotations

from pathlib import Path

from shared.db.footprint import (
    MB,
    auto_cache_mb,
    disk_bytes,
    machine_memory_bytes,
    outgrowing,
    resolve_cache_size,
    size_bytes,
)

GB = 1024 * MB


def test_the_cache_is_a_quarter_of_the_memory_between_1_and_16_gb() -> None:
    assert auto_cache_mb(2 * GB) == 1024, "a small machine still gets 1 GB (it held 100,000 jobs)"
    assert auto_cache_mb(24 * GB) == 6 * 1024
    assert auto_cache_mb(1024 * GB) == 16 * 1024, "a large box gives its jobs the rest"
    assert resolve_cache_size("AUTO", 24 * GB) == "6144M"
    assert resolve_cache_size("512M", 24 * GB) == "512M", "an operator's size is kept"
    assert size_bytes("512M") == 512 * MB and size_bytes("2G") == 2 * GB


def test_the_operator_is_told_past_70_percent_of_the_cache_and_what_to_do() -> None:
    assert outgrowing(700 * MB, 1000 * MB) is None
    said = outgrowing(979 * MB, 1024 * MB)
    assert said is not None and "979 MB" in said and "96%" in said and "1,024 MB" in said
    assert "PAIQ_EMBEDDED_DB_CACHE" in said and "PAIQ_JOB_RETENTION_DAYS" in said


def test_what_is_on_disk_counts_every_file_below(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    (tmp_path / "a.wt").write_bytes(b"x" * 1000)
    (tmp_path / "journal" / "log.1").write_bytes(b"y" * 24)
    assert disk_bytes(tmp_path) == 1024
    assert disk_bytes(tmp_path / "absent") == 0


def test_a_containers_memory_limit_is_the_machines_memory(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")  # cgroup v2 without a limit
    whole = machine_memory_bytes((v2, v1))
    v1.write_text(f"{2 * GB}\n")
    assert machine_memory_bytes((v2, v1)) == min(whole, 2 * GB)
    assert auto_cache_mb(machine_memory_bytes((v2, v1))) == 1024
