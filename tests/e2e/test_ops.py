"""What operators scrape and probe: /healthz and Prometheus /metrics of every service."""

from __future__ import annotations

import json

import aiohttp
import pytest

from shared.client import PaiqClient
from tests.e2e.conftest import job_config
from tests.infra import Platform, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

# Which service owns which metric (in `paiq up` they all show on the API port).
OWNED = {
    "status": ['paiq_jobs{state="SUCCEEDED",vc="default"}'],
    "scheduler": ["paiq_scheduling_seconds_count", 'paiq_queue_wait_seconds_count{vc="default"}',
                  'paiq_node_gpus{kind="free",node='],
    "launcher": ["paiq_launch_seconds_count", "paiq_events_handled_total{"],
}


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        return resp.status, await resp.text()


async def test_every_service_answers_health_and_metrics(platform: Platform, api: PaiqClient, user: str) -> None:
    await api.submit(user, json.dumps(job_config("measured", command="true")).encode())
    await wait_final(api, user, "measured")
    await _wait_for_gauges(platform)
    bases = platform.ops if platform.shape == "separate" else dict.fromkeys(OWNED, platform.api)
    assert set(bases) == set(OWNED)
    for service, base in bases.items():
        status, body = await get(base + "/healthz")
        health = json.loads(body)
        assert status == 200 and health["status"] == "ok", (service, health)
        assert health["checks"] == {"database": "ok", "broker": "ok"}, (service, health)
        assert health["loops"] and set(health["loops"].values()) == {"ok"}, (service, health)
        if service == "scheduler":
            assert health["roles"] == {"scheduler": "leader"}, health
        status, text = await get(base + "/metrics")
        assert status == 200
        for metric in OWNED[service]:
            assert metric in text, f"{service} does not expose {metric}"
    status, text = await get(platform.api + "/metrics")
    assert status == 200 and "paiq_events_handled_total" in text


async def _wait_for_gauges(platform: Platform) -> None:
    """The job gauges are refreshed by the status service's periodic pass (every 2 s in tests)."""
    import asyncio

    base = platform.ops.get("status", platform.api)
    for _ in range(50):
        _, text = await get(base + "/metrics")
        if 'paiq_jobs{state="SUCCEEDED",vc="default"}' in text:
            return
        await asyncio.sleep(0.2)
