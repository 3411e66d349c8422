"""The pure cores stay pure: nothing they import, directly or through other project modules, does I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# Whole packages are pure (every module of them, and all they import): the folders are the map.
PURE = ["shared.jobconfig", "shared.jobconfig.v2", "shared.admission", "shared.admission.v2", "shared.records",
        "shared.taskref", "shared.packing", "shared.keywords", "shared.scheduling", "shared.scheduling.placement",
        "shared.scheduling.preemption",
        "shared.lifecycle", "shared.tasks", "shared.profiling", "shared.notify", "shared.usage",
        "services.launcher.exits", "services.launcher.decide", "services.launcher.engine.tasklabels",
        "services.launcher.engine.enginestats",
        "services.submit.loginguard"]
IO = {"asyncio", "aio_pika", "aiormq", "pymongo", "bson", "docker", "aiohttp", "socket", "subprocess",
      "threading", "requests", "urllib.request"}


def _file(module: str) -> Path | None:
    base = ROOT / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imports(module: str, *, whole_package: bool = False) -> set[str]:
    path = _file(module)
    assert path is not None, module
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if _file(f"{node.module}.{alias.name}") is not None)
    if whole_package and path.name == "__init__.py":  # a pure core that is a package: all of it
        found.update(f"{module}.{p.stem}" for p in path.parent.glob("*.py") if p.stem != "__init__")
    return found


def _closure(module: str) -> dict[str, str]:
    """Every module reachable from ``module`` -> the project module that imports it."""
    seen: dict[str, str] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        for imported in _imports(current, whole_package=current == module):
            if imported in seen:
                continue
            seen[imported] = current
            if imported.split(".")[0] in {"shared", "services"} and _file(imported) is not None:
                todo.append(imported)
    return seen


@pytest.mark.parametrize("module", PURE)
def test_pure_core_imports_no_io(module: str) -> None:
    bad = {name: via for name, via in _closure(module).items()
           if name in IO or name.split(".")[0] in IO}
    assert bad == {}, f"{module} reaches I/O: " + ", ".join(f"{n} (from {v})" for n, v in sorted(bad.items()))


def test_the_check_sees_io_where_there_is_some() -> None:
    assert any(name.split(".")[0] == "pymongo" for name in _closure("shared.db.store"))
