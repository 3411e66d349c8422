"""The event catalogue (shared/schemas/EVENTS.md) says who publishes and who consumes each event; these
tests hold it to the code, so that it cannot drift: consumers against each service's own bindings and
router, publishers against the modules that build each event."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from services.launcher.deps import LauncherDeps
from services.launcher.service import launcher_bindings, launcher_router
from services.notify.service import NotifyDeps, notify_router
from services.scheduler.service import scheduler_router
from services.status.service import StatusDeps, status_router
from shared.bus.base import Router, topic_matches
from shared.db.store import Store
from shared.eventdocs import CONSUMERS, PUBLISHERS, RELAY, ROUTING_KEYS, event_classes, event_type
from shared.events import CloudEvent
from shared.ops.vitals import Vitals
from shared.runtime.relay import Relay

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("submit", "scheduler", "status", "launcher", "notify")
NODE = "n1"


class RecordingBus:
    """Takes a subscription's bindings and router instead of consuming."""

    def __init__(self) -> None:
        self.subscribed: list[tuple[Sequence[str], Router]] = []

    async def subscribe(self, queue: str, bindings: Sequence[str], router: Router, *, durable: bool = True,
                        prefetch: int | None = None, retired: Sequence[str] = ()) -> RecordingBus:
        self.subscribed.append((bindings, router))
        return self

    async def cancel(self) -> None:
        return None


async def _nothing(_: CloudEvent) -> Sequence[CloudEvent]:
    return []


async def subscriptions() -> dict[str, list[tuple[Sequence[str], Router]]]:
    """Each service's queues as the service itself binds them and routes what arrives."""
    relay_bus = RecordingBus()
    store = cast(Store, SimpleNamespace(journal=SimpleNamespace(tail=None, listeners=[])))
    async with AsyncExitStack() as stack:
        await Relay(store, relay_bus, retention_ms=0).attach(stack, cast(Vitals, _NoLoops()), "paiq")  # type: ignore[arg-type]
    scheduler, status = scheduler_router(_nothing), status_router(cast(StatusDeps, None))
    return {
        "scheduler": [(scheduler.event_types, scheduler)],
        "status": [(status.event_types, status)],
        "launcher": [(launcher_bindings(NODE), launcher_router(cast(LauncherDeps, None)))],
        "notify": [(["notify.subscriptions_changed"], notify_router(cast(NotifyDeps, None)))],
        RELAY: relay_bus.subscribed,
    }


class _NoLoops:
    def background(self, *_: object) -> None:
        return None


def _routing_key(kind: str) -> str:
    return ROUTING_KEYS.get(kind, kind).replace("<node_id>", NODE)


async def test_every_event_a_queue_is_bound_to_has_a_handler_there() -> None:
    kinds = [event_type(c) for c in event_classes()]
    for service, queues in (await subscriptions()).items():
        for bindings, router in queues:
            bound = {k for k in kinds if any(topic_matches(b, _routing_key(k)) for b in bindings)}
            assert bound <= set(router.event_types), f"{service} receives events it cannot route"


async def test_the_catalogue_names_every_consumer_of_each_event() -> None:
    consumers: dict[str, set[str]] = defaultdict(set)
    for service, queues in (await subscriptions()).items():
        for bindings, _ in queues:
            for cls in event_classes():
                if any(topic_matches(b, _routing_key(event_type(cls))) for b in bindings):
                    consumers[event_type(cls)].add(service)
    said = {kind: set(names) for kind, names in CONSUMERS.items() if names}  # none: read from the journal only
    assert said == dict(consumers), "shared/eventdocs.py CONSUMERS differs from the services' bindings"


def _module_of(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST) -> set[str]:
    """The modules a module imports by name (``from a import b`` counts as both ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _built(tree: ast.AST, classes: dict[str, str]) -> set[str]:
    """The event types whose model a module calls (builds)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in classes:
                found.add(classes[name])
    return found


def publishers_in_code() -> dict[str, set[str]]:
    """Each event's publishers: the services whose modules build it, and for a module of shared/ that builds
    it (the lifecycle's transitions), the services that import that module themselves."""
    classes = {cls.__name__: event_type(cls) for cls in event_classes()}
    trees = {_module_of(p): ast.parse(p.read_text()) for top in ("services", "shared")
             for p in (REPO / top).rglob("*.py")}
    importers: dict[str, set[str]] = defaultdict(set)
    for module, tree in trees.items():
        if module.split(".")[:2] in [["services", s] for s in SERVICES]:
            for name in _imported(tree):
                importers[name].add(module.split(".")[1])
    publishers: dict[str, set[str]] = defaultdict(set)
    for module, tree in trees.items():
        if module == "shared.events":
            continue
        top, _, rest = module.partition(".")
        services = {rest.partition(".")[0]} if top == "services" else importers.get(module, set())
        if module == "shared.runtime.relay":  # every service process runs it
            services = {RELAY}
        for kind in _built(tree, classes):
            publishers[kind].update(services)
    return dict(publishers)


def test_the_catalogue_names_every_publisher_of_each_event() -> None:
    said = {kind: set(names) for kind, names in PUBLISHERS.items()}
    assert said == publishers_in_code(), "shared/eventdocs.py PUBLISHERS differs from where events are built"


def test_the_catalogue_covers_every_event() -> None:
    kinds = {event_type(c) for c in event_classes()}
    assert set(PUBLISHERS) == kinds and set(CONSUMERS) == kinds
