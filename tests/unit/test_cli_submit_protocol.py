"""``paiq submit FILE`` sends each protocol where it belongs: v2 to /api/v2/jobs, v1 to /api/v1."""

from __future__ import annotations

import pytest

from services.cli.main import protocol_of

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


@pytest.mark.parametrize(("file_name", "text", "expected"), [
    ("job.yaml", "name: x", (2, "text/yaml")),
    ("job.YML", "{}", (2, "text/yaml")),
    ("job.json", '{"jobName": "x", "taskRoles": []}', (1, "application/json")),
    ("job.json", '{"protocolVersion": 2, "name": "x"}', (2, "application/json")),
    ("job.txt", "protocolVersion: 2\nname: x\n", (2, "text/yaml")),
    ("job", "protocolVersion: '2'\n", (2, "text/yaml")),
    ("job", "not: [valid", (1, "application/json")),
    ("job", "jobName: x\n", (1, "application/json")),
])
def test_the_protocol_is_told_by_the_name_or_the_document(file_name: str, text: str,
                                                          expected: tuple[int, str]) -> None:
    assert protocol_of(file_name, text.encode()) == expected
