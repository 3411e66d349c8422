"""The house's import contracts (pyproject.toml's [tool.importlinter]): kept by the code as it is, and each
broken by the imports that made the cycles and upward imports issue 38 found (10 pairs of folders importing
each other in shared/, a circle of files in shared/db, three imports running back up in services/submit,
the launcher's engine and profiling importing each other). Those modules have moved since; each import is
put back here, in today's names, into the real import graph, and the contract that must catch it is named.
"""

from __future__ import annotations

import copy
from pathlib import Path

import grimp
import pytest
from importlinter.application.use_cases import read_user_options
from importlinter.configuration import configure
from importlinter.contracts.layers import LayersContract

REPO = Path(__file__).resolve().parents[2]

# (importer, imported) put back -> the contract that refuses it
BACK_IMPORTS: dict[tuple[str, str], str] = {
    # shared/: the job config below what it was checked with (jobconfig <-> tasks, scheduling, notify, lifecycle)
    ("shared.jobconfig.model", "shared.tasks.envvars"): "shared",
    ("shared.jobconfig.model", "shared.scheduling.placement.place"): "shared",
    ("shared.jobconfig.model", "shared.notify.decide"): "shared",
    ("shared.jobconfig.limits", "shared.lifecycle.transitions"): "shared",
    ("shared.admission.validation", "shared.bus.base"): "shared",
    # the record type on the database layer (records -> db.lists.keywords, db.packing)
    ("shared.records", "shared.db.lists.paging"): "shared",
    # the adapters and the service runner (bus <-> runtime, db <-> runtime)
    ("shared.bus.base", "shared.runtime.service"): "shared",
    ("shared.db.store", "shared.runtime.relay"): "shared",
    ("shared.ops.vitals", "shared.db.store"): "shared",
    # the circle of files in shared/db (store <-> indexes <-> submission; jobreads <-> jobcache; lists -> store)
    ("shared.db.indexes", "shared.db.store"): "db",
    ("shared.db.submission", "shared.db.store"): "db",
    ("shared.db.jobcache", "shared.db.jobreads"): "db",
    ("shared.db.lists.paging", "shared.db.store"): "db",
    # services/submit: imports running back up (throttle -> routes, contract -> routes, users -> contract)
    ("services.submit.contract.answers", "services.submit.routes.clusters"): "submit",
    ("services.submit.users", "services.submit.contract.views"): "submit",
    ("services.submit.errors", "services.submit.routes.access"): "submit",
    ("services.submit.deps", "services.submit.app"): "submit",
    # the launcher's engine and its profiling
    ("services.launcher.engine.driver", "services.launcher.profiling.sampling"): "launcher",
    # services never import each other, and shared/ none of them
    ("services.scheduler.service", "services.status.service"): "services",
    ("services.submit.app", "services.platform"): "services",
    ("shared.records", "services.submit.users"): "services-over-shared",
}


def _contracts() -> dict[str, LayersContract]:
    configure()  # import-linter's own readers, as its command line sets them
    options = read_user_options(str(REPO / "pyproject.toml"))
    return {c["id"]: LayersContract(name=c["name"], session_options=options.session_options, contract_options=c)
            for c in options.contracts_options}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("shared", "services", include_external_packages=False, cache_dir=None)


def _broken(contract: LayersContract, graph: grimp.ImportGraph) -> bool:
    return not contract.check(copy.deepcopy(graph), verbose=False).kept


def test_the_code_keeps_every_contract(graph: grimp.ImportGraph) -> None:
    contracts = _contracts()
    assert set(contracts) == {"services-over-shared", "services", "shared", "db", "submit", "launcher"}
    assert [name for name, c in contracts.items() if _broken(c, graph)] == []


@pytest.mark.parametrize(("importer", "imported"), list(BACK_IMPORTS), ids=lambda m: m.replace("shared.", ""))
def test_each_cycle_found_before_is_refused_by_its_contract(graph: grimp.ImportGraph, importer: str,
                                                            imported: str) -> None:
    assert importer in graph.modules and imported in graph.modules, "a module this test names has moved"
    back = copy.deepcopy(graph)
    back.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    contract = _contracts()[BACK_IMPORTS[(importer, imported)]]
    assert _broken(contract, back), f"{importer} -> {imported} is not refused by {contract.name!r}"


def test_a_module_no_layer_names_is_refused(graph: grimp.ImportGraph) -> None:
    """Exhaustive: a new module of a container must be placed in a layer, or the contract fails."""
    placed = copy.deepcopy(graph)
    placed.add_module("shared.newthing")
    assert _broken(_contracts()["shared"], placed)
