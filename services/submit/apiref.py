"""``python -m services.submit.apiref`` writes the REST API's reference page, ``docs/reference/api.md``, from
the document the API serves (:mod:`services.submit.apidoc` renders it); a test fails when the committed page
differs from this rendering (tests/unit/test_docs.py), so the page cannot drift from the routes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from services.submit.apidoc import markdown
from services.submit.openapi import document

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md"  # in the repository


def rendered() -> str:
    return markdown(document())


if __name__ == "__main__":
    PAGE.write_text(rendered())
    print(PAGE, file=sys.stderr)
