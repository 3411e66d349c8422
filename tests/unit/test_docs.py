"""The documentation: the site (docs/, mkdocs.yml) builds strictly, so a broken link, a missing anchor or a page
left out of the navigation fails the suite; the generated API and CLI references and the configuration table are
what the served document, the parser and the settings models say; the README stays the front door (under 150
lines) and every file it links to exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*.html")}
    assert {"index.html", "users/quickstart.html", "operators/configuration.html",
            "reference/rest-api.html", "contributors/layout.html"} <= pages


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """What the strict build catches (a link to a page that is not there), shown on a copy of the docs."""
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(REPO / "docs"), str(docs)], check=True)
    page = docs / "users" / "portal.md"
    page.write_text(page.read_text() + "\nSee [the missing page](missing.md).\n")
    config = (REPO / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    (tmp_path / "mkdocs.yml").write_text(config)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode != 0 and "missing.md" in done.stdout + done.stderr


def test_the_api_reference_page_is_what_the_served_document_says() -> None:
    from services.submit.apiref import PAGE, rendered
    assert PAGE.read_text() == rendered(), "stale: run `python -m services.submit.apiref`"
    for method, path in (("POST", "/api/v1/user/{user}/jobs"), ("GET", "/api/v2/jobs"), ("GET", "/healthz")):
        assert f"### `{method} {path}`" in PAGE.read_text()


def test_the_cli_reference_page_is_what_the_parser_says() -> None:
    from services.cli.reference import PAGE, rendered
    assert PAGE.read_text() == rendered(), "stale: run `python -m services.cli.reference`"
    assert "## `paiq submit`" in PAGE.read_text() and "## `paiq vc set`" in PAGE.read_text()


def test_the_configuration_table_is_what_the_settings_models_say() -> None:
    from shared.settings.reference import PAGE, rendered
    page = PAGE.read_text()
    assert page == rendered(page), "stale: run `python -m shared.settings.reference`"
    assert "| `PAIQ_PREEMPTIONS_PER_PASS` | `4` | 0 to 64 |" in page  # default and bounds from the model
    assert "| `PAIQ_MAX_STRING_BYTES` | 128 KiB | 1 KiB to 1 MiB |" in page


def test_a_variable_without_a_meaning_or_a_meaning_without_a_variable_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.settings import reference
    from shared.settings.meanings import ROWS, Row
    monkeypatch.setattr(reference, "ROWS", tuple(r for r in ROWS if "PAIQ_LEASE_SECONDS" not in r.variables))
    with pytest.raises(reference.UndescribedSettingError, match="no meaning for PAIQ_LEASE_SECONDS"):
        reference.tables()
    monkeypatch.setattr(reference, "ROWS", (*ROWS, Row(("PAIQ_NO_SUCH",), "read by nobody")))
    with pytest.raises(reference.UndescribedSettingError, match="describes PAIQ_NO_SUCH, which no model reads"):
        reference.tables()
    node_cpus = next(r for r in ROWS if "PAIQ_NODE_CPUS" in r.variables)  # its default is the machine's
    monkeypatch.setattr(reference, "ROWS", tuple(Row(r.variables, r.meaning) if r is node_cpus else r for r in ROWS))
    with pytest.raises(reference.UndescribedSettingError, match="PAIQ_NODE_CPUS, PAIQ_NODE_MEMORY_MB: the default"):
        reference.tables()


def test_the_readme_is_the_front_door() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    assert "bash examples/quickstart.sh" in readme and "bash tests/run.sh" in readme  # the two commands


@pytest.mark.parametrize("link", re.findall(r"\]\((?!https?://|#)([^)\s#]+)", (REPO / "README.md").read_text()))
def test_every_file_the_readme_links_to_exists(link: str) -> None:
    assert (REPO / link).exists(), link
