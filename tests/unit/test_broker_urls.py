"""BROKER_URL as a list of RabbitMQ nodes (chronocore.broker_urls) and what reads it."""

from __future__ import annotations

import argparse

import pytest

from chronocore.broker_urls import (
    join_broker_urls,
    node_address,
    redacted,
    rotated,
    split_broker_urls,
    virtual_host,
)
from chronocore.config import ChronoConfig, load_config
from chronocore.credentials import Secret, ServiceCredentials, fill_urls, weak_credentials
from chronocore.errors import ConfigError
from localservices.config import ServiceConfigError, parse_broker_url
from localservices.lifecycle import _ports
from localservices.rabbitmq_cluster import (
    _erlang_atoms,
    cluster_node_name,
    peer_discovery_config,
)

A = "amqp://chrono:s3cret-a@rabbit1:5672/chrono"
B = "amqp://chrono:s3cret-b@rabbit2:5673/chrono"
C = "amqps://chrono:s3cret-c@rabbit3/chrono"


def test_one_url_is_a_list_of_one_node():
    assert split_broker_urls("amqp://127.0.0.1:5672//") == ("amqp://127.0.0.1:5672//",)


def test_a_cluster_is_its_nodes_separated_by_semicolons_in_their_order():
    assert split_broker_urls(f"{A};{B};{C}") == (A, B, C)
    assert split_broker_urls(f" {A} ; {B} ") == (A, B)


def test_node_addresses_default_the_port_by_scheme():
    assert [node_address(u) for u in (A, B, C)] == ["rabbit1:5672", "rabbit2:5673",
                                                     "rabbit3:5671"]
    assert node_address("amqp://u:p@[::1]:5700/v") == "[::1]:5700"


@pytest.mark.parametrize("value", [f"{A};", f";{A}", f"{A};;{B}", ""])
def test_an_empty_entry_is_refused_naming_broker_url(value):
    with pytest.raises(ConfigError, match="BROKER_URL.* is empty"):
        split_broker_urls(value)


def test_an_entry_that_is_not_amqp_is_refused_naming_its_place_without_its_password():
    with pytest.raises(ConfigError, match="BROKER_URL entry 2 of 2") as error:
        split_broker_urls(f"{A};redis://:hunter2@rabbit2:6379/0")
    assert "hunter2" not in str(error.value)


def test_a_bad_port_or_a_missing_host_is_refused():
    with pytest.raises(ConfigError, match="port is not a number"):
        split_broker_urls(f"{A};amqp://u:p@rabbit2:56x2/chrono")
    with pytest.raises(ConfigError, match="names no host"):
        split_broker_urls(f"{A};amqp:///chrono")


def test_a_node_listed_twice_is_refused():
    with pytest.raises(ConfigError, match="rabbit1:5672 twice .entries 1 and 2"):
        split_broker_urls(f"{A};amqp://other:pw@rabbit1/chrono")


def test_nodes_of_different_virtual_hosts_are_refused():
    with pytest.raises(ConfigError, match="different virtual hosts .chrono, other"):
        split_broker_urls(f"{A};amqp://chrono:pw@rabbit2/other")
    assert virtual_host("amqp://h//") == "/" and virtual_host("amqp://h") == "/"


def test_rotated_puts_one_node_first_and_keeps_the_order_of_the_rest():
    assert rotated((A, B, C), 1) == (B, C, A)
    assert rotated((A, B, C), 4) == (B, C, A)
    assert rotated((), 2) == ()
    assert split_broker_urls(join_broker_urls(rotated((A, B, C), 2))) == (C, A, B)


def test_redacted_hides_the_password_only():
    assert redacted(A) == "amqp://chrono:***@rabbit1:5672/chrono"
    assert redacted("amqp://rabbit1//") == "amqp://rabbit1//"


def test_the_config_refuses_a_bad_node_list_and_lists_a_good_one():
    with pytest.raises(ConfigError, match="BROKER_URL"):
        ChronoConfig(broker_url=f"{A};")
    config = load_config({"BROKER_URL": f"{A};{B}", "CHRONO_CREDENTIALS_FILE": "/nonexistent"})
    assert config.broker_urls == (A, B)


def test_the_credentials_file_completes_every_loopback_node_of_a_list():
    secret = ServiceCredentials(broker=Secret(user="chrono", password="from-file"))
    urls = fill_urls({"broker": "amqp://127.0.0.1:5701/chrono;amqp://127.0.0.1:5702/chrono;"
                                f"{B}"}, secret)
    assert split_broker_urls(urls["broker"]) == ("amqp://chrono:from-file@127.0.0.1:5701/chrono",
                                                 "amqp://chrono:from-file@127.0.0.1:5702/chrono",
                                                 B)


def test_a_list_is_as_weak_as_its_weakest_node():
    assert weak_credentials({"broker": f"{A};{B}"}) == []
    problems = weak_credentials({"broker": f"{A};amqp://guest:guest@rabbit2/chrono"})
    assert problems == ["BROKER_URL has a well-known default password: set it to "
                        "amqp://USER:PASSWORD@HOST:5672/VHOST"]


def test_chrono_services_refuses_a_node_list_and_says_what_runs_a_cluster():
    with pytest.raises(ServiceConfigError, match="cluster-up rabbitmq"):
        parse_broker_url("amqp://127.0.0.1:5701/c;amqp://127.0.0.1:5702/c")


def test_cluster_up_ports_are_three_or_more_numbers_below_the_distribution_offset():
    assert _ports("5701,5702,5703") == (5701, 5702, 5703)
    for bad in ("5701,5702", "5701,x,5703", "5701,5702,50000"):
        with pytest.raises(argparse.ArgumentTypeError, match="--ports"):
            _ports(bad)


def test_every_node_but_none_of_the_shared_one_joins_the_seed_by_classic_config():
    text = peer_discovery_config(cluster_node_name(5701))
    assert "cluster_formation.peer_discovery_backend = classic_config" in text
    assert "cluster_formation.classic_config.nodes.1 = chrono-rmq5701@localhost" in text
    assert cluster_node_name(5702) != "chrono@localhost"


def test_the_running_nodes_are_read_from_rabbitmqctl_eval():
    printed = ("['chrono-rmq5701@localhost','chrono-rmq5702@localhost',\n"
               " 'chrono-rmq5703@localhost']\n")
    assert _erlang_atoms(printed) == ["chrono-rmq5701@localhost", "chrono-rmq5702@localhost",
                                      "chrono-rmq5703@localhost"]
    assert _erlang_atoms("[]") == []
