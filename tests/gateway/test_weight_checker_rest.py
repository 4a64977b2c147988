"""vLLM's /weight_checker and cache-reset routes through Envoy (the
gateway with --control): vLLM's JSON shapes (`mismatches: []` included),
the admin key required like every control route."""

from __future__ import annotations

import httpx

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine

ADMIN = {"authorization": "Bearer adm"}


def test_vllms_weight_checker_shapes_through_the_gateway() -> None:
    with fake_serving(FakeEngine(max_model_len=64), enable_control=True,
                      admin_api_key="adm") as server:
        gw = start_gateway(server.address, control=True)
        try:
            url = gw.url
            sums = httpx.post(f"{url}/weight_checker", json={"action": "checksum"},
                              headers=ADMIN, timeout=30).json()["checksums"]
            assert len(sums) == 2
            same = httpx.post(f"{url}/weight_checker", headers=ADMIN, timeout=30,
                              json={"action": "compare", "baseline": sums})
            assert same.json() == {"match": True, "mismatches": []}
            other = httpx.post(f"{url}/weight_checker", headers=ADMIN, timeout=30,
                               json={"action": "compare", "baseline": {"x": "y"}})
            assert other.json() == {"match": False, "mismatches": sorted([*sums, "x"])}
            for route in ("/reset_mm_cache", "/reset_encoder_cache"):
                assert httpx.post(f"{url}{route}", headers=ADMIN, timeout=30).status_code == 200
            refused = httpx.post(f"{url}/weight_checker", json={"action": "checksum"}, timeout=30)
            assert refused.status_code in (401, 403)
            bad = httpx.post(f"{url}/weight_checker", json={"action": "scrub"}, headers=ADMIN,
                             timeout=30)
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "action"
        finally:
            stop_gateway(gw)
