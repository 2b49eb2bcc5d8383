"""``chrono services cluster-up|cluster-down KIND``: the clusters of real servers on loopback
that the cluster tests and benchmarks run Chrono against, each kind in a module of its own.

``cluster-up`` starts the kind's cluster in ``$CHRONO_DATA_DIR`` (or finds it running) and prints
the URL variable Chrono's processes then take, as ``NAME=value`` on standard output;
``cluster-down`` stops it and deletes its directory. Never the shared services of ``up``/``down``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from chronocore.credentials import DEFAULT_DATA_DIR
from localservices import pgcluster, rabbitmq_cluster, redis_cluster

# kind: (url variable, start it and return the url, stop and delete it)
CLUSTER_KINDS: dict[str, tuple[str, Callable[..., str], Callable[[Path], None]]] = {
    "rabbitmq": ("BROKER_URL", rabbitmq_cluster.cluster_up, rabbitmq_cluster.cluster_down),
    # Its cluster_up also prints CHRONO_REDIS_CLUSTER=true, the second setting it needs.
    "redis": ("REDIS_URL", redis_cluster.cluster_up, redis_cluster.cluster_down),
    "postgresql": ("DATABASE_URL", pgcluster.cluster_up, pgcluster.cluster_down),
}


def data_dir() -> Path:
    return Path(os.environ.get("CHRONO_DATA_DIR") or DEFAULT_DATA_DIR).absolute()


def cluster_command(command: str, kinds: list[str], *, ports: tuple[int, ...] | None) -> int:
    """Run ``cluster-up`` or ``cluster-down`` for each of ``kinds``; the exit status."""
    for kind in kinds:
        variable, up, down = CLUSTER_KINDS[kind]
        if command == "cluster-up":
            print(f"{variable}={up(data_dir(), ports=ports)}")
        else:
            down(data_dir())
    return 0
