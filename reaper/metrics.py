"""The reaper's series and health, for its probe port (:mod:`chronocore.probe`).

Every series is read from the reaper's own counters when Prometheus scrapes: the loop pays
nothing for them.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from chronocore.probe import Check, CheckResult, ProbeServer, serve_probe
from reaper.reaper import Reaper

_COUNTS = (
    ("workers_down", "chrono_reaper_workers_marked_down",
     "Workers marked down after missing their heartbeats."),
    ("lost", "chrono_reaper_executions_lost",
     "Running executions declared lost (lease expired or worker down)."),
    ("retried", "chrono_reaper_lost_retried", "Lost executions sent to another attempt."),
    ("dead_lettered", "chrono_reaper_lost_dead_lettered",
     "Lost executions that had no attempt left (dead-lettered or failed)."),
    ("resent", "chrono_reaper_retries_resent",
     "Attempts re-sent because their retry time had long passed (their sender died)."),
    ("cancelled", "chrono_reaper_lost_cancelled",
     "Lost executions that had been asked to cancel: ended CANCELLED."),
    ("failed_iterations", "chrono_reaper_failed_passes",
     "Passes that failed (PostgreSQL, Redis or RabbitMQ unreachable) and were retried."),
    ("retention_passes", "chrono_reaper_retention_passes",
     "Retention passes run (executions' partitions ahead, expired days, shipped audit rows)."),
    ("partitions_dropped", "chrono_reaper_partitions_dropped",
     "Expired days of executions dropped by the retention passes."),
    ("stream_indices_deleted", "chrono_reaper_stream_indices_deleted",
     "Expired backing indices of the audit and execution-log streams the retention passes "
     "deleted (only on an engine without ILM/ISM)."),
)


class ReaperCollector:
    """Counters of one :class:`~reaper.reaper.Reaper` as Prometheus counters."""

    def __init__(self, reaper: Reaper) -> None:
        self.reaper = reaper

    def collect(self):
        counters = self.reaper.counters
        for attribute, name, documentation in _COUNTS:
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], getattr(counters, attribute))
            yield family
        kept = GaugeMetricFamily(
            "chrono_reaper_expired_partitions_kept",
            "Expired days of executions the last retention pass kept (an execution unfinished, "
            "an audit row unshipped or a workflow end unapplied).")
        kept.add_metric([], counters.partitions_kept)
        yield kept
        streams = GaugeMetricFamily(
            "chrono_reaper_streams_failed",
            "Data streams the last retention pass could not roll over or prune (the search "
            "engine out of reach or refusing).")
        streams.add_metric([], counters.streams_failed)
        yield streams
        for name, documentation, per_queue in (
            ("chrono_reaper_undelivered_flagged",
             "Executions flagged: they waited past undelivered_flag_after_ms on a queue "
             "without consumers.", counters.undelivered_flagged),
            ("chrono_reaper_undelivered_cleared",
             "Flags taken off waiting executions because their queue had a consumer again.",
             counters.undelivered_cleared),
        ):
            family = CounterMetricFamily(name, documentation, labels=["queue"])
            for queue, count in sorted(per_queue.items()):
                family.add_metric([queue], count)
            yield family
        deleted = CounterMetricFamily(
            "chrono_reaper_retention_deleted",
            "Rows of things that ended before the retention cutoff deleted by the retention "
            "passes: ended jobs, finished workflow runs, workers gone, dashboard rollup rows, "
            "expired idempotency records.",
            labels=["what"])
        for what, count in sorted(counters.retention_deleted.items()):
            deleted.add_metric([what.replace(" ", "_")], count)
        yield deleted


def reaper_checks(reaper: Reaper) -> dict[str, Check]:
    """``/health`` of a reaper: its passes go through."""

    def passes() -> CheckResult:
        result = reaper.progress.check()
        return CheckResult(result.healthy, {
            **result.details, "failed_passes": reaper.counters.failed_iterations,
        })

    return {"passes": passes}


def serve_reaper_probe(reaper: Reaper, *, port: int, address: str,
                       registry: CollectorRegistry = REGISTRY) -> ProbeServer:
    """Serve the reaper's ``/metrics`` and ``/health`` on ``address:port``."""
    registry.register(ReaperCollector(reaper))
    return serve_probe(process="reaper", port=port, address=address, registry=registry,
                       checks=reaper_checks(reaper), progresses=[reaper.progress])
