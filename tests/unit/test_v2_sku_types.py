"""``GET /api/v2/cluster/sku-types``'s pure core: each GPU type's unit (one GPU and its node's CPUs and memory
per GPU, the least such node's), nodes without GPUs as ``CPU``; and a VC in OpenPAI v1.8's shape."""

from __future__ import annotations

import pytest

from services.submit.contract import answers
from services.submit.contract.v2.users import SkuType
from services.submit.routes.v2.clusters import sku_types, vc_v2
from shared.records import NodeRecord
from shared.scheduling.vclusters import Quota
from tests.unit.factories import make_node

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("nodes", "expected"), [
    ([], {}),
    ([make_node(cpus=16, memory_mb=65536, gpus=["V100"] * 4)], {"V100": SkuType(gpu=1, cpu=4, memory=16384)}),
    ([make_node("a", cpus=16, memory_mb=65536, gpus=["V100"] * 4),
      make_node("b", cpus=8, memory_mb=65536, gpus=["V100"] * 4)], {"V100": SkuType(gpu=1, cpu=2, memory=16384)}),
    ([make_node("a", cpus=32, memory_mb=131072, gpus=["A100"] * 8),
      make_node("b", cpus=8, memory_mb=16384)],
     {"A100": SkuType(gpu=1, cpu=4, memory=16384), "CPU": SkuType(gpu=0, cpu=1, memory=2048)}),
], ids=["none", "one-node", "least-node", "gpu-and-cpu"])
def test_sku_types(nodes: list[NodeRecord], expected: dict[str, SkuType]) -> None:
    assert sku_types(nodes) == expected


def test_a_vc_in_openpai_shape() -> None:
    res = answers.Resources(cpus=8, memory_mb=1000, gpus=2)
    used = answers.Resources(cpus=2, memory_mb=100, gpus=1)
    zero = answers.Amounts(cpus=0, memory_mb=0, gpus=0)
    vc = answers.VirtualCluster(name="r", quota=Quota(cpus=50, memory=50, gpus=50), borrowing=Quota(gpus=25),
                                users=(), groups=(), capacity=res, used=used, borrowed=zero, lent=zero, jobs={})
    shown = vc_v2(vc, gpu_total=4).model_dump(by_alias=True)
    assert shown["capacity"] == 50 and shown["maxCapacity"] == 75 and shown["usedCapacity"] == 25
    assert shown["resourcesUsed"] == {"cpu": 2, "memory": 100, "gpu": 1, "vCores": 2, "GPUs": 1}
