"""Each yardstick of bench/ceilings.py measures something on this machine's real services
(timing is the benchmarks' business: here only that each gives a positive rate)."""

from __future__ import annotations

import pytest

from bench import ceilings
from chronocore.config import get_config


def test_cpu_yardstick_counts_loops():
    assert ceilings.cpu_loops_per_s(duration_s=0.05) > 0


def test_unconfirmed_publish_rate_to_a_quorum_queue(services_up):
    assert ceilings.amqp_publish_per_s(get_config().broker_url, messages=200) > 0


@pytest.mark.django_db
def test_copy_rate(services_up):
    assert ceilings.copy_rows_per_s(rows=1_000) > 0


def test_ratio_of_a_nested_figure_to_its_ceiling():
    report = {"minutes": [{"publish_rate_per_s": 5_000}]}
    found = ceilings.ratio(report, "minutes.0.publish_rate_per_s", "amqp_publish_per_s",
                           {"amqp_publish_per_s": 20_000})
    assert found == {"figure": "minutes.0.publish_rate_per_s", "of": "amqp_publish_per_s",
                     "value": 0.25}


def test_no_ratio_without_a_figure_or_a_measured_one():
    assert ceilings.ratio({"rate_per_s": None}, "rate_per_s", "copy_rows_per_s",
                          {"copy_rows_per_s": 1.0}) is None
    assert ceilings.ratio({"rate_per_s": 3}, None, None, {}) is None


def test_a_report_gets_the_ceilings_and_the_ratio_of_its_figure():
    measured = {"cpu_loops_per_s": 1.0, "amqp_publish_per_s": 1.0, "copy_rows_per_s": 100.0}
    report = ceilings.with_ceilings({"bench": "x", "rate_per_s": 50.0}, figure="rate_per_s",
                                    of="copy_rows_per_s", measure_ceilings=lambda: measured)
    assert report["ceilings"] == measured
    assert report["ratio"] == {"figure": "rate_per_s", "of": "copy_rows_per_s", "value": 0.5}
