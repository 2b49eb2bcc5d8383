"""The pure rules behind Chrono on a Redis Cluster: the configuration, the announcement channels'
names, what tells the reconciler a failover happened, and how the loopback cluster reads its
ports and CLUSTER NODES."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode

from chronocore import redis_client
from chronocore.config import ConfigError, load_config, redis_database
from chronocore.redis_client import (
    ClusterScript,
    cluster_startup,
    connect,
    database_of,
    register_script,
)
from localservices.errors import ServiceConfigError
from localservices.redis_cluster import LocalRedisCluster, parse_cluster_nodes
from scheduler.announcements import ANNOUNCE, CANCEL, channel_name
from scheduler.reconcile import _describe_change, serving_primaries

URL = "redis://:pw@127.0.0.1:7101"


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize("url, database", [
    ("redis://:pw@h:6379", 0), ("redis://:pw@h:6379/", 0), ("redis://:pw@h:6379/7", 7),
    ("redis://:pw@h:6379?db=3", 3), ("redis://:pw@h:6379/2?db=3", 2),
])
def test_the_database_a_redis_url_names(url, database):
    assert redis_database(url) == database


def test_a_database_that_is_no_number_is_refused_by_name():
    with pytest.raises(ConfigError, match="REDIS_URL names database 'x'"):
        redis_database("redis://h/x")


def test_every_client_gives_up_on_a_silent_server_after_the_configured_time(monkeypatch):
    config = load_config({"CHRONO_REDIS_SOCKET_TIMEOUT_MS": "700"})
    monkeypatch.setattr(redis_client, "get_config", lambda: config)
    kwargs = connect(f"{URL}/0", cluster=False).connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.7, 0.7)
    probe = connect(f"{URL}/0", cluster=False, socket_timeout=0.2)  # a caller's own wins
    assert probe.connection_pool.connection_kwargs["socket_timeout"] == 0.2
    assert load_config({}).redis_socket_timeout_ms == 2_000
    with pytest.raises(ConfigError, match="CHRONO_REDIS_SOCKET_TIMEOUT_MS must be at least 100"):
        load_config({"CHRONO_REDIS_SOCKET_TIMEOUT_MS": "10"})


def test_a_cluster_is_off_by_default_and_takes_database_zero_only():
    assert load_config({"REDIS_URL": f"{URL}/4"}).redis_cluster is False
    on = load_config({"REDIS_URL": f"{URL}/0", "CHRONO_REDIS_CLUSTER": "true"})
    assert on.redis_cluster is True
    assert load_config({"REDIS_URL": URL, "CHRONO_REDIS_CLUSTER": "1"}).redis_cluster
    with pytest.raises(ConfigError, match="REDIS_URL names database 4 but CHRONO_REDIS_CLUSTER"):
        load_config({"REDIS_URL": f"{URL}/4", "CHRONO_REDIS_CLUSTER": "true"})
    with pytest.raises(ConfigError, match="CHRONO_REDIS_CLUSTER='maybe' is not a boolean"):
        load_config({"CHRONO_REDIS_CLUSTER": "maybe"})


# -- announcement channels -------------------------------------------------------------------


def test_a_cluster_url_may_list_its_nodes_each_tried_at_a_clients_start():
    nodes = "redis://:p%40w@n1:7101,n2,[::1]:7103/0"
    assert load_config({"REDIS_URL": nodes, "CHRONO_REDIS_CLUSTER": "true"}).redis_cluster
    first, startup = cluster_startup(nodes)
    assert first == "redis://:p%40w@n1:7101/0"  # redis-py reads the password from it
    assert [(node.host, node.port) for node in startup] == [
        ("n1", 7101), ("n2", 6379), ("::1", 7103)]
    assert cluster_startup(f"{URL}/0") == (f"{URL}/0", [ClusterNode("127.0.0.1", 7101)])


@pytest.mark.parametrize("url, cluster, message", [
    ("redis://:pw@n1:7101,n2:7102/0", "false",
     "REDIS_URL names 2 hosts but CHRONO_REDIS_CLUSTER is off"),
    ("redis://:pw@n1:71x1,n2:7102/0", "true", "REDIS_URL: the port of 'n1:71x1' is not a number"),
    ("redis://:secret@n1:7101,,n2:7102/0", "true",
     r"REDIS_URL 'redis://:\*\*\*@n1:7101,,n2:7102/0' has an empty host"),
])
def test_a_node_list_that_cannot_be_used_is_refused_naming_what_to_change(url, cluster,
                                                                         message):
    with pytest.raises(ConfigError, match=message):
        load_config({"REDIS_URL": url, "CHRONO_REDIS_CLUSTER": cluster})


def test_a_single_servers_channels_carry_its_database():
    assert channel_name(ANNOUNCE, database=0) == "chrono:db0:announce"
    assert channel_name(CANCEL, database=15) == "chrono:db15:cancel"
    assert channel_name(ANNOUNCE, database=1) != channel_name(ANNOUNCE, database=2)
    assert channel_name(ANNOUNCE, database=1) != channel_name(CANCEL, database=1)


def test_a_clusters_channels_are_one_per_kind():
    assert channel_name(ANNOUNCE, database=None) == "chrono:announce"
    assert channel_name(CANCEL, database=None) == "chrono:cancel"


def test_unknown_kinds_and_negative_databases_are_refused():
    with pytest.raises(ValueError, match="unknown announcement kind 'announcements'"):
        channel_name("announcements", database=0)
    with pytest.raises(ValueError, match="never negative"):
        channel_name(ANNOUNCE, database=-1)


def test_a_clients_database_is_read_from_its_pool_without_connecting():
    assert database_of(redis.Redis.from_url("redis://127.0.0.1:1/9")) == 9
    assert database_of(redis.Redis.from_url("redis://127.0.0.1:1")) == 0


# -- scripts on a cluster --------------------------------------------------------------------


class RecordingCommands:
    """A stand-in client (or pipeline) that records the commands sent to it."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def execute_command(self, *args):
        self.sent.append(args)
        return len(self.sent)


def test_a_cluster_script_sends_its_source_with_eval_to_the_client_it_is_given():
    registered, pipeline = RecordingCommands(), RecordingCommands()
    script = ClusterScript(registered, "return KEYS[1]")
    script(keys=["{chrono:1}:due", "{chrono:1}:lease"], args=["a|1", 5])
    script(keys=["{chrono:2}:due"], args=[], client=pipeline)
    assert registered.sent == [("EVAL", "return KEYS[1]", 2, "{chrono:1}:due",
                                "{chrono:1}:lease", "a|1", 5)]
    assert pipeline.sent == [("EVAL", "return KEYS[1]", 1, "{chrono:2}:due")]


def test_a_single_server_keeps_redis_pys_script_objects():
    script = register_script(redis.Redis.from_url("redis://127.0.0.1:1/0"), "return 1")
    assert type(script).__name__ == "Script"


# -- failover detection ------------------------------------------------------------------------


def _node(node_id: str, flags: str, slots: list) -> dict:
    return {"node_id": node_id, "flags": flags, "slots": slots, "master_id": "-"}


def test_the_serving_primaries_change_once_a_replica_is_promoted():
    healthy = {"a:1": _node("A", "myself,master", [["0", "5460"]]),
               "a:2": _node("B", "master", [["5461", "16383"]]),
               "a:3": _node("A2", "slave", [])}
    failed = {**healthy, "a:1": _node("A", "master,fail", [["0", "5460"]])}
    promoted = {"a:1": _node("A", "master,fail", []), "a:2": healthy["a:2"],
                "a:3": _node("A2", "master", [["0", "5460"]])}
    assert serving_primaries(healthy) == {"A", "B"}
    assert serving_primaries(failed) == serving_primaries(healthy)  # not yet: no repair twice
    assert serving_primaries(promoted) == {"A2", "B"}
    assert _describe_change(serving_primaries(healthy), serving_primaries(promoted)) == (
        "primaries A replaced by A2")
    assert _describe_change("run-1", "run-2") == "run id run-1 -> run-2"


# -- the loopback cluster ----------------------------------------------------------------------


def test_a_cluster_needs_three_primaries_with_their_replicas():
    LocalRedisCluster(directory=Path("/nonexistent"), ports=tuple(range(7101, 7107)))
    with pytest.raises(ServiceConfigError, match="at least 3 primaries"):
        LocalRedisCluster(directory=Path("/nonexistent"), ports=(7101, 7102, 7103, 7104))
    with pytest.raises(ServiceConfigError, match="at least 3 primaries"):
        LocalRedisCluster(directory=Path("/nonexistent"), ports=tuple(range(7101, 7108)))
    with pytest.raises(ServiceConfigError, match="the cluster bus listens at port \\+ 10000"):
        LocalRedisCluster(directory=Path("/nonexistent"), ports=tuple(range(60000, 60006)))


def test_cluster_nodes_are_read_by_port_with_roles_and_failures():
    text = (
        "id1 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460\n"
        "id2 127.0.0.1:7102@17102 master,fail - 0 0 2 disconnected\n"
        "id3 127.0.0.1:7103@17103 slave id1 0 0 1 connected\n"
        "id4 127.0.0.1:7104@17104 master - 0 0 7 connected 5461-10922 10923-16383\n"
    )
    nodes = parse_cluster_nodes(text)
    assert nodes[7101] == {"id": "id1", "role": "primary", "primary": None, "failed": False,
                           "slots": ["0-5460"]}
    assert nodes[7102]["failed"] and nodes[7102]["slots"] == []
    assert nodes[7103]["role"] == "replica" and nodes[7103]["primary"] == 7101
    assert nodes[7104]["slots"] == ["5461-10922", "10923-16383"]
