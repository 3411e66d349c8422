"""The web portal with protocol v2: a YAML job uploaded and refused (each path named), then pasted and
accepted; its page shows its config as the masked v2 document; a clone loads it under the next name."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.cli.client import PaiqClient
from tests.e2e.browser import Page, chromium
from tests.e2e.conftest import logged_in
from tests.e2e.test_portal import ALL_IN_ONE, PASSWORD, Account
from tests.e2e.test_v2_submit import v2_yaml
from tests.infra import Platform, unique

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
async def account(admin: PaiqClient, user: str) -> Account:
    """As tests/e2e/test_portal.py's: the test's own user, with a password, and its token."""
    client = await logged_in(admin, user, PASSWORD)
    return Account(user, client, (await admin.with_token(None).login(user, PASSWORD))["token"])


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    async with chromium() as p:
        yield p
        assert p.errors == [], "the page logged errors"


@ALL_IN_ONE
async def test_a_v2_yaml_job_is_submitted_shown_masked_and_cloned(
        platform: Platform, account: Account, page: Page, tmp_path: Path) -> None:
    # The name ends in a word: a random tail of digits only (1 in 100) would be bumped as a number, as the
    # portal bumps "train-2" to "train-3", and the clone would not be called "<name>-2".
    secret, name = unique("portal-secret-"), f"{unique('portal-v2-')}-train"
    await page.goto(f"{platform.api}/#/submit?token={account.token}")
    await page.wait("!!document.querySelector('#job-file')", "the submit form")

    bad = v2_yaml(name, secret).replace("dockerImage: busybox", "dockerImage: nothere")
    (tmp_path / "bad.yaml").write_text(bad)
    await page.upload("#job-file", tmp_path / "bad.yaml")
    await page.wait("document.querySelector('#job-config').value.includes('nothere')", "the file in the editor")
    await page.click("#submit-job")
    await page.wait("!!document.querySelector('#problems')", "the refusal")
    assert await page.texts("#problems li") == ["taskRoles.main.dockerImage: Prerequisite nothere does not exist."]

    await page.type("#job-config", v2_yaml(name, secret))
    await page.click("#submit-job")
    await page.wait("!!document.querySelector('#submitted-link')", "the acceptance")
    assert f"Update job {name} for user {account.user} successfully" in await page.text("#submit-result")

    await page.click("#submitted-link")
    # The status first: it arrives after the panels and pushes them down, so a click before it can miss.
    await page.wait("!!document.querySelector('#status') && !!document.querySelector('#job-config-panel')",
                    "the job page")
    await page.click("#job-config-panel summary")
    shown = await page.wait("document.querySelector('#job-config-text').innerText.includes('protocolVersion')"
                            " && document.querySelector('#job-config-text').innerText", "the config")
    document = json.loads(shown)
    assert document["secrets"] == "******" and document["name"] == name
    assert "protocol v2" in await page.text("#job-config-panel summary")
    assert secret not in await page.eval("document.body.innerText")

    await page.click("a[href^='#/submit?from=']")
    cloned = await page.wait(f"document.querySelector('#job-config').value.includes('{name}-2')"
                             " && document.querySelector('#job-config').value", "the cloned config")
    assert json.loads(cloned)["name"] == f"{name}-2"
    assert "secrets are masked" in await page.text("#submit-result")
