"""The Python DSL writes the same JSON the REST API takes, is validated by the same rules, and
defines, starts and reads runs by the tenant's slug."""

from __future__ import annotations

import pytest

from workflows.dsl import Workflow, ref, run_status
from workflows.errors import DefinitionError

pytestmark = pytest.mark.django_db(transaction=True)


class FakeTask:  # what the DSL reads of a Celery task: its name
    name = "etl.extract"


def _etl() -> Workflow:
    etl = Workflow("nightly-etl", run_timeout_s=3600)
    extract = etl.step("extract", FakeTask(), kwargs={"day": ref("input.day")},
                       retry={"max_attempts": 3})
    load = etl.map("load", "etl.load_one", parents=[extract],
                   over="steps.extract.result.rows", kwargs={"row": ref("map.item")})
    etl.fan_in("total", "etl.total", parents=[load])
    etl.step("notify", "etl.notify", parents=["total"], trigger_rule="all_done")
    return etl


def test_the_dsl_writes_the_rest_apis_json():
    spec = _etl().to_dict()
    assert spec["name"] == "nightly-etl" and spec["run_timeout_s"] == 3600
    assert spec["steps"][0] == {"key": "extract", "task": "etl.extract", "parents": [],
                                "kwargs": {"day": {"$ref": "input.day"}},
                                "retry": {"max_attempts": 3}}
    assert spec["steps"][1]["kind"] == "map" and spec["steps"][1]["parents"] == ["extract"]
    assert spec["steps"][2]["kind"] == "fan_in"


def test_define_start_and_status_by_tenant_slug(tenant, redis_client):
    etl = _etl()
    assert etl.define(tenant="acme").version == 1
    assert etl.define(tenant="acme").version == 1
    run = etl.start(tenant="acme", run_input={"day": "2026-12-01"}, idempotency_key="d1")
    status = run_status(run.run_id, tenant="acme")
    assert status["status"] == "RUNNING"
    assert {s["key"]: s["status"] for s in status["steps"]}["extract"] == "READY"


def test_a_bad_dsl_definition_names_the_field_path(tenant):
    bad = Workflow("bad")
    bad.step("a", "t", parents=["missing"])
    with pytest.raises(DefinitionError) as raised:
        bad.define(tenant=tenant)
    assert raised.value.paths() == ["steps.a.parents[0]"]
