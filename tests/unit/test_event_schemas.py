"""The published event schemas and the events page are exactly what the event models say."""

from __future__ import annotations

import json

import jsonschema
import pytest

from shared.eventdocs import REFERENCE_DIR, SCHEMA_DIR, event_classes, event_type, reference, rendered
from shared.events import (
    JobSubmitted,
    JobSubmittedData,
    LaunchTasks,
    LaunchTasksData,
    TaskExited,
    TaskExitedData,
    dump_event,
)

pytestmark = pytest.mark.unit


def test_generated_files_are_up_to_date() -> None:
    stale = [name for name, text in rendered().items()
             if not (SCHEMA_DIR / name).exists() or (SCHEMA_DIR / name).read_text() != text]
    assert stale == [], f"run `python -m shared.eventdocs`: stale or missing {stale}"
    extra = {p.name for p in SCHEMA_DIR.iterdir()} - set(rendered())
    assert extra == set(), f"files no event describes: {extra}"


def test_the_documentations_event_reference_is_up_to_date() -> None:
    pages = reference()
    stale = [name for name, text in pages.items()
             if not (REFERENCE_DIR / name).exists() or (REFERENCE_DIR / name).read_text() != text]
    assert stale == [], f"run `python -m shared.eventdocs`: stale or missing {stale}"
    extra = {p.relative_to(REFERENCE_DIR).as_posix() for p in (REFERENCE_DIR / "schemas").iterdir()} - set(pages)
    assert extra == set(), f"files no event describes: {extra}"


def test_every_event_type_is_on_the_page() -> None:
    page = (SCHEMA_DIR / "EVENTS.md").read_text()
    for cls in event_classes():
        assert f"| `{event_type(cls)}` |" in page


@pytest.mark.parametrize("event", [
    JobSubmitted(subject="a~j~1", data=JobSubmittedData(job_id="a~j~1", user="a", virtual_cluster="default")),
    TaskExited(subject="a~j~1", data=TaskExitedData(job_id="a~j~1", attempt=0, role="r", index=0, node_id="n",
                                                     exit_code=3, reason="exit 3")),
    LaunchTasks(subject="a~j~1", data=LaunchTasksData(job_id="a~j~1", attempt=0, node_id="n", tasks=())),
])
def test_real_events_validate_against_their_published_schema(event: object) -> None:
    body = json.loads(dump_event(event))  # type: ignore[arg-type]
    schema = json.loads((SCHEMA_DIR / f"{body['type']}.json").read_text())
    jsonschema.validate(body, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**body, "data": {}}, schema)
