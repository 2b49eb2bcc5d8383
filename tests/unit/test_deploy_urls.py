"""Service URLs of a deployment on several hosts (docs/production.md): any host, TLS, and the
database's libpq parameters, parsed the way every Chrono process connects."""

from __future__ import annotations

import pytest

from chronocore.config import ConfigError, database_settings
from scheduler.dispatch import amqp_connection_params


def test_a_broker_on_another_host_is_reached_there_with_the_urls_credentials():
    params = amqp_connection_params("amqp://chrono:s%40cret@rabbit.internal:5672/chrono")
    assert params == {"host": "rabbit.internal:5672", "userid": "chrono",
                      "password": "s@cret", "virtual_host": "chrono"}


def test_amqps_is_tls_with_the_host_name_checked_on_port_5671_by_default():
    params = amqp_connection_params("amqps://chrono:pw@rabbit.example.com//")
    assert params["host"] == "rabbit.example.com:5671"
    assert params["ssl"] == {"server_hostname": "rabbit.example.com"}
    assert "ssl" not in amqp_connection_params("amqp://chrono:pw@rabbit.example.com//")


def test_an_ipv6_broker_address_keeps_its_brackets():
    assert amqp_connection_params("amqp://u:p@[fd00::7]:5673//")["host"] == "[fd00::7]:5673"


def test_a_broker_url_of_another_scheme_is_refused_by_name():
    with pytest.raises(ValueError, match="BROKER_URL must start with amqp:// or amqps://"):
        amqp_connection_params("redis://127.0.0.1:6379/0")


def test_database_url_parameters_reach_libpq_as_options():
    settings = database_settings(
        "postgresql://chrono:pw@db.internal:6432/chrono?sslmode=verify-full"
        "&sslrootcert=/etc/chrono/db-ca.pem&connect_timeout=5")
    assert (settings["HOST"], settings["PORT"], settings["NAME"]) == ("db.internal", "6432",
                                                                       "chrono")
    assert settings["OPTIONS"] == {"sslmode": "verify-full",
                                   "sslrootcert": "/etc/chrono/db-ca.pem",
                                   "connect_timeout": "5"}
    assert "OPTIONS" not in database_settings("postgresql://chrono:pw@db.internal/chrono")


def test_an_unknown_database_url_parameter_is_refused_naming_it():
    with pytest.raises(ConfigError, match="DATABASE_URL has unknown parameters sslmod:"):
        database_settings("postgresql://chrono:pw@db.internal/chrono?sslmod=require")


def test_a_multi_host_database_url_gives_libpq_every_host_and_port_in_order():
    settings = database_settings(
        "postgresql://chrono:pw@127.0.0.1:5501,db2.internal:5502,[fd00::7]/chrono"
        "?target_session_attrs=read-write")
    assert settings["HOST"] == "127.0.0.1,db2.internal,fd00::7"
    assert settings["PORT"] == "5501,5502,5432"
    assert (settings["USER"], settings["PASSWORD"]) == ("chrono", "pw")
    assert settings["OPTIONS"] == {"target_session_attrs": "read-write"}


def test_a_multi_host_database_url_must_ask_for_the_writable_server():
    with pytest.raises(ConfigError, match="names 2 hosts but not target_session_attrs=read-write"):
        database_settings("postgresql://chrono:pw@db1:5432,db2:5432/chrono")
    with pytest.raises(ConfigError, match="target_session_attrs=read-write"):
        database_settings("postgresql://chrono:pw@db1,db2/chrono?target_session_attrs=any")
    assert database_settings("postgresql://chrono:pw@db1,db2/chrono"
                             "?target_session_attrs=primary")["HOST"] == "db1,db2"


def test_a_database_url_port_that_is_not_a_number_is_refused_naming_it():
    with pytest.raises(ConfigError, match="the port of 'db2:54x2' is not a number"):
        database_settings("postgresql://chrono:pw@db1:5432,db2:54x2/chrono"
                          "?target_session_attrs=read-write")
