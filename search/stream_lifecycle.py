"""Chrono's own lifecycle for its data streams on an engine that runs none.

The audit stream and the execution-log stream ship with a retention policy (``search/policies/``:
ILM on Elasticsearch, ISM on OpenSearch): roll the write index over once it is a day old or its
primary shards hold 50 GB, and delete a backing index a number of days after its rollover
(``audit_retention_days``, ``execution_log_retention_days``). OpenSearch runs ISM only with its
Index State Management plugin, which not every distribution carries (this machine's test node
can have none: docs/audit.md); without it both streams would grow until someone deleted their
indices by hand. So the retention pass (:mod:`scheduler.retention`) applies the same policy
itself, with the data stream APIs every engine has, wherever the engine has no lifecycle of its
own (where it has one, it alone acts: two would roll over twice):

* **rollover** when the write index is older than the policy's ``min_index_age`` or its
  primaries store more than ``min_primary_shard_size``, and it holds a document (as ILM does
  by default: a quiet stream does not make an empty index a day);
* **delete** each backing index but the write index whose rollover is older than the retention:
  its rollover is the creation of the next generation, when it stopped being written to (what
  ISM's ``min_rollover_age`` measures).

The thresholds are read from the shipped ISM policy, so the two cannot drift apart. Not a
library: the engine's own plugin is the library, and this stands in for it where it is absent.
A pass runs at most every ``retention_interval_ms`` (hourly by default), so a rollover is up to
that late; ISM's own job runs every few minutes.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from search.client import Engine, SearchClient
from search.errors import SearchError, SearchNotFound
from search.index_template import ISM_PLUGIN, AuditStream, BackingIndices
from search.index_template import ISM_POLICY_FILE as AUDIT_ISM_POLICY_FILE
from search.log_stream import ISM_POLICY_FILE as LOG_ISM_POLICY_FILE
from search.log_stream import LogStream

if TYPE_CHECKING:
    from chronocore.config import ChronoConfig

log = logging.getLogger("chrono.retention")

DAY_MS = 86_400_000
_TIME_UNITS_MS = {"d": DAY_MS, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40,
               "pb": 1 << 50}
_QUANTITY = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")


def _quantity(text: str, units: dict[str, int], what: str) -> int:
    """``"1d"`` or ``"50gb"`` (the engines' unit syntax, whole numbers as the shipped policies
    write them) in the smallest unit of ``units``."""
    match = _QUANTITY.match(text.lower())
    if match is None or match.group(2) not in units:
        raise ValueError(f"{what} {text!r}: expected a whole number and one of "
                         f"{', '.join(units)}")
    return int(match.group(1)) * units[match.group(2)]


@dataclass(frozen=True)
class Rules:
    """When a stream's write index rolls over, and when a rolled-over index is deleted."""

    rollover_age_ms: int
    rollover_bytes: int
    retention_ms: int

    @classmethod
    def from_ism_policy(cls, path: Path, retention_days: int) -> Rules:
        """The rollover thresholds of the shipped ISM policy at ``path`` (its hot state's
        ``rollover`` action), deleting ``retention_days`` after the rollover, as the installed
        policy would (:func:`search.index_template.ism_policy` writes the same days into it)."""
        policy = json.loads(path.read_text())["policy"]
        rollover = next(action["rollover"] for state in policy["states"]
                        for action in state["actions"] if "rollover" in action)
        return cls(
            rollover_age_ms=_quantity(rollover["min_index_age"], _TIME_UNITS_MS,
                                      "min_index_age"),
            rollover_bytes=_quantity(rollover["min_primary_shard_size"], _SIZE_UNITS,
                                     "min_primary_shard_size"),
            retention_ms=retention_days * DAY_MS,
        )


@dataclass(frozen=True)
class BackingIndex:
    name: str
    created_ms: int
    primary_bytes: int
    documents: int


@dataclass(frozen=True)
class Plan:
    rollover: bool
    delete: tuple[str, ...]


def plan(indices: Sequence[BackingIndex], rules: Rules, *, at_ms: int) -> Plan:
    """What the policy does to a stream whose backing indices are ``indices`` (oldest first,
    the last one the write index) at ``at_ms``."""
    if not indices:
        return Plan(rollover=False, delete=())
    write = indices[-1]
    rollover = write.documents > 0 and (at_ms - write.created_ms >= rules.rollover_age_ms
                                        or write.primary_bytes >= rules.rollover_bytes)
    delete = tuple(
        index.name for index, successor in zip(indices, indices[1:], strict=False)
        if at_ms - successor.created_ms >= rules.retention_ms
    )
    return Plan(rollover=rollover, delete=delete)


@dataclass
class StreamOutcome:
    """What one pass did (or, on a dry run, would do) to one data stream."""

    stream: str
    # "ILM" or "ISM": the engine applies the policy itself, and this pass did nothing;
    # "chrono": this pass applied it; "absent": the stream does not exist (yet).
    managed_by: str
    rolled_over_to: str | None = None
    deleted: list[str] = field(default_factory=list)
    error: str | None = None

    def lines(self, *, dry_run: bool) -> list[str]:
        verb = "would " if dry_run else ""
        if self.error is not None:
            return [f"failed on data stream {self.stream}: {self.error}"]
        if self.managed_by == "absent":
            return [f"data stream {self.stream}: not created yet, nothing to do"]
        if self.managed_by != "chrono":
            return [f"data stream {self.stream}: left to the engine's {self.managed_by} policy"]
        out = [f"{verb}delete index {name} of data stream {self.stream}"
               for name in self.deleted]
        if self.rolled_over_to:
            out.append(f"{verb}roll data stream {self.stream} over to {self.rolled_over_to}")
        if not out:
            out.append(f"data stream {self.stream}: nothing to roll over or delete")
        return out


def engine_lifecycle(client: SearchClient) -> str | None:
    """``"ILM"`` (Elasticsearch), ``"ISM"`` (OpenSearch with the plugin), or None: the engine
    applies no policy, and :func:`apply` must."""
    if client.engine().engine is Engine.ELASTICSEARCH:
        return "ILM"
    return "ISM" if ISM_PLUGIN in client.plugin_names() else None


def apply(client: SearchClient, data_stream: BackingIndices, rules: Rules, *, at_ms: int,
          dry_run: bool = False) -> StreamOutcome:
    """Apply ``rules`` to ``data_stream`` now (``at_ms``): its expired indices deleted first,
    then its write index rolled over when due."""
    stream = data_stream.name
    outcome = StreamOutcome(stream=stream, managed_by="chrono")
    try:
        names = client.data_stream_indices(stream)
    except SearchNotFound:
        outcome.managed_by = "absent"
        return outcome
    known = client.backing_index_stats(data_stream.backing_index_pattern)
    indices = [BackingIndex(name, *known[name]) for name in names if name in known]
    if len(indices) != len(names):
        # An index listed by the stream but not by its settings (deleted in between): the
        # generations' order, which the rules read, is unknown; the next pass tries again.
        outcome.error = f"{len(names) - len(indices)} backing indices changed during the pass"
        return outcome
    todo = plan(indices, rules, at_ms=at_ms)
    outcome.deleted = list(todo.delete)
    if todo.rollover:
        outcome.rolled_over_to = "a new write index"
    if dry_run:
        return outcome
    for name in todo.delete:
        client.delete_index(name)
        log.info("data stream %s: index %s deleted (rolled over more than %d days ago)",
                 stream, name, rules.retention_ms // DAY_MS)
    if todo.rollover:
        outcome.rolled_over_to = client.rollover(stream)
        log.info("data stream %s rolled over to %s", stream, outcome.rolled_over_to)
    return outcome


def run(config: ChronoConfig, *, dry_run: bool = False, at_ms: int | None = None
        ) -> list[StreamOutcome]:
    """One pass over the deployment's audit and execution-log streams (the retention pass's
    step for the search engine). An engine that cannot be reached fails its streams' outcomes,
    never the pass: PostgreSQL's retention does not wait on it."""
    at_ms = int(time.time() * 1000) if at_ms is None else at_ms
    streams: list[tuple[BackingIndices, Rules]] = [
        (AuditStream.from_config(config),
         Rules.from_ism_policy(AUDIT_ISM_POLICY_FILE, config.audit_retention_days)),
        (LogStream.from_config(config),
         Rules.from_ism_policy(LOG_ISM_POLICY_FILE, config.execution_log_retention_days)),
    ]
    try:
        with SearchClient.from_config(config) as client:
            managed_by = engine_lifecycle(client)
            if managed_by is not None:
                return [StreamOutcome(stream=data_stream.name, managed_by=managed_by)
                        for data_stream, _ in streams]
            outcomes = []
            for data_stream, rules in streams:
                try:
                    outcomes.append(
                        apply(client, data_stream, rules, at_ms=at_ms, dry_run=dry_run))
                except SearchError as exc:
                    outcomes.append(StreamOutcome(stream=data_stream.name, managed_by="chrono",
                                                  error=str(exc)))
            return outcomes
    except SearchError as exc:
        return [StreamOutcome(stream=data_stream.name, managed_by="chrono", error=str(exc))
                for data_stream, _ in streams]
