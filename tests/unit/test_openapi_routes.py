"""The OpenAPI document describes exactly the routes the app serves."""

from __future__ import annotations

import re
from typing import Any, cast

import pytest

from services.submit.app import create_app
from services.submit.openapi import document

pytestmark = pytest.mark.unit


def test_every_route_is_documented_and_nothing_else() -> None:
    app = create_app(cast(Any, None))
    served = {(r.method.lower(), r.resource.canonical) for r in app.router.routes()
              if r.resource is not None and r.method != "HEAD"}
    documented = {(method, path) for path, ops in document()["paths"].items() for method in ops}
    assert served == documented


def test_every_reference_resolves() -> None:
    doc = document()
    text = repr(doc)
    for name in re.findall(r"#/components/schemas/(\w+)", text):
        assert name in doc["components"]["schemas"], name
