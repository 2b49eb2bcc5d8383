"""How every Chrono process finds its services' credentials (``chronocore.credentials``, read by
``chronocore.config``), and how ``chrono services`` stores them (``localservices.secrets``):
files in a temporary directory, no service."""

from __future__ import annotations

import os
import stat
from urllib.parse import urlsplit

import pytest

from chronocore.config import ConfigError, load_config
from chronocore.credentials import (
    CredentialsError,
    Secret,
    ServiceCredentials,
    credentials_path,
    parse_credentials,
    read_credentials,
    render_credentials,
    weak_credentials,
    with_secret,
)
from localservices import secrets
from localservices.errors import ServiceConfigError

SECRET = Secret(user="chrono", password="s3cr3t-Pass_word")
STORED = ServiceCredentials(
    database=Secret(user="chrono", password="db-pass"),
    redis=Secret(user="", password="redis-pass"),
    broker=Secret(user="chrono", password="amqp-pass"),
    search=Secret(user="chrono", password="search-pass"),
)


@pytest.fixture
def credentials_file(tmp_path):
    path = tmp_path / "credentials.env"
    path.write_text(render_credentials(STORED, header="test file"))
    return path


def test_the_file_renders_and_parses_back_with_its_comments_ignored():
    text = render_credentials(STORED, header="line one\nline two")
    assert text.splitlines()[:2] == ["# line one", "# line two"]
    assert "REDIS_USER" not in text  # Redis's secret is the default user's password
    assert parse_credentials(text, source="t") == STORED


def test_a_value_is_everything_after_the_first_equals_sign_without_expansion():
    parsed = parse_credentials("DATABASE_USER=chrono\nDATABASE_PASSWORD=a=b$HOME${X}\n",
                               source="t")
    assert parsed.database == Secret(user="chrono", password="a=b$HOME${X}")


@pytest.mark.parametrize("line", ["DATABASE_PASSWORD", "UNKNOWN=1", "export REDIS_PASSWORD=x"])
def test_a_malformed_line_is_refused_naming_the_file_and_line(line):
    with pytest.raises(CredentialsError, match=r"creds\.env, line 2: expected NAME=value"):
        parse_credentials(f"# ok\n{line}\n", source="creds.env")


def test_a_missing_file_holds_nothing_and_an_unreadable_one_is_an_error(tmp_path):
    assert read_credentials(tmp_path / "absent.env") == ServiceCredentials()
    unreadable = tmp_path / "a-directory.env"
    unreadable.mkdir()  # root reads any mode, but no one reads a directory as a file
    with pytest.raises(CredentialsError, match="cannot read the credentials file .*a-directory"):
        read_credentials(unreadable)


def test_the_file_is_in_the_data_dir_unless_credentials_file_names_another():
    assert credentials_path({}) == credentials_path({"CHRONO_DATA_DIR": "/var/lib/chrono"})
    assert str(credentials_path({})) == "/var/lib/chrono/credentials.env"
    assert str(credentials_path({"CHRONO_DATA_DIR": "/srv/c"})) == "/srv/c/credentials.env"
    assert str(credentials_path({"CHRONO_DATA_DIR": "/srv/c",
                                 "CHRONO_CREDENTIALS_FILE": "/etc/chrono/creds"})) == (
        "/etc/chrono/creds")


def test_a_loopback_url_without_a_password_takes_the_secret():
    assert with_secret("postgresql://127.0.0.1:5442/chrono", SECRET) == (
        "postgresql://chrono:s3cr3t-Pass_word@127.0.0.1:5442/chrono")
    assert with_secret("postgresql://chrono@localhost/chrono", SECRET) == (
        "postgresql://chrono:s3cr3t-Pass_word@localhost/chrono")
    assert with_secret("redis://127.0.0.1:6379/3", Secret(user="", password="p")) == (
        "redis://:p@127.0.0.1:6379/3")
    assert with_secret("amqp://[::1]:5672//", SECRET).startswith("amqp://chrono:s3cr3t")


def test_explicit_credentials_another_user_and_remote_hosts_keep_their_url():
    for url in (
        "postgresql://chrono:given@127.0.0.1/chrono",  # explicit credentials win
        "postgresql://bob@127.0.0.1/chrono",  # the file's secret is chrono's, not bob's
        "postgresql://chrono@db.internal/chrono",  # never guessed for a remote server
    ):
        assert with_secret(url, SECRET) == url
    assert with_secret("redis://127.0.0.1/0", None) == "redis://127.0.0.1/0"


def test_characters_of_a_chosen_password_are_quoted_in_the_url():
    url = with_secret("amqp://127.0.0.1:5672//", Secret(user="a b", password="p@ss:/w#rd"))
    parts = urlsplit(url)
    assert (parts.hostname, parts.port, parts.path) == ("127.0.0.1", 5672, "//")
    assert url == "amqp://a%20b:p%40ss%3A%2Fw%23rd@127.0.0.1:5672//"


def test_a_multi_host_loopback_url_takes_the_secret_for_every_host():
    url = with_secret("postgresql://chrono@127.0.0.1:5501,localhost:5502/chrono"
                      "?target_session_attrs=read-write", Secret(user="chrono", password="p/w"))
    assert url == ("postgresql://chrono:p%2Fw@127.0.0.1:5501,localhost:5502/chrono"
                   "?target_session_attrs=read-write")


def test_a_multi_host_url_with_one_remote_host_gets_no_secret():
    url = "postgresql://chrono@127.0.0.1:5501,db2.internal:5502/chrono"
    assert with_secret(url, Secret(user="chrono", password="pw")) == url


def test_the_config_completes_every_service_url_from_the_file(credentials_file):
    config = load_config({
        "CHRONO_CREDENTIALS_FILE": str(credentials_file),
        "DATABASE_URL": "postgresql://chrono@127.0.0.1:5442/chrono",
        "REDIS_URL": "redis://127.0.0.1:6389/11",
    })
    assert config.credentials_path == credentials_file
    assert config.service_urls() == {
        "database": "postgresql://chrono:db-pass@127.0.0.1:5442/chrono",
        "redis": "redis://:redis-pass@127.0.0.1:6389/11",
        "broker": "amqp://chrono:amqp-pass@127.0.0.1:5672//",
        "search": "http://chrono:search-pass@127.0.0.1:9200",
    }


def test_the_config_with_no_file_keeps_the_urls_and_with_an_unreadable_one_fails(tmp_path):
    config = load_config({"CHRONO_DATA_DIR": str(tmp_path)})
    assert config.database_url == "postgresql://chrono@127.0.0.1:5432/chrono"
    assert config.broker_url == "amqp://127.0.0.1:5672//"
    (tmp_path / "credentials.env").mkdir()
    with pytest.raises(ConfigError, match="cannot read the credentials file"):
        load_config({"CHRONO_DATA_DIR": str(tmp_path)})


def test_empty_and_well_known_credentials_are_weak_and_say_what_to_set():
    problems = weak_credentials({
        "database": "postgresql://chrono:chrono@db/chrono",
        "redis": "redis://db:6379/0",
        "broker": "amqp://guest:guest@mq//",
        "search": "http://chrono:Zq3-generated-xyz@search:9200",
    })
    assert problems == [
        "DATABASE_URL has a well-known default password: set it to "
        "postgresql://USER:PASSWORD@HOST:5432/chrono",
        "REDIS_URL has no password: set it to redis://:PASSWORD@HOST:6379/0",
        "BROKER_URL has a well-known default password: set it to "
        "amqp://USER:PASSWORD@HOST:5672/VHOST",
    ]
    assert weak_credentials({"search": "http://es:9200"}, search_api_key="aWQ6a2V5") == []
    assert weak_credentials({"broker": "amqp://guest:Zq3-long-random@mq//"}) == [
        "BROKER_URL logs in as guest, RabbitMQ's default user: set it to "
        "amqp://USER:PASSWORD@HOST:5672/VHOST"]


# ------------------------------------------------------------------- localservices.secrets


def _env(tmp_path, **urls: str) -> dict[str, str]:
    return {"CHRONO_DATA_DIR": str(tmp_path / "data"), **urls}


def test_ensure_generates_a_secret_per_service_in_a_file_only_its_owner_reads(tmp_path):
    env = _env(tmp_path)
    path = secrets.ensure_credentials(env)
    assert path == tmp_path / "data" / "credentials.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_uid == os.geteuid()
    stored = read_credentials(path)
    assert [stored.database.user, stored.redis.user, stored.broker.user, stored.search.user] == [
        "chrono", "", "chrono", "chrono"]
    passwords = [secret.password for secret in stored.as_dict().values()]
    assert len(set(passwords)) == 4
    assert all(len(p) == 43 and p.replace("-", "").replace("_", "").isalnum() for p in passwords)


def test_ensure_twice_keeps_the_file_as_it_is(tmp_path):
    env = _env(tmp_path)
    path = secrets.ensure_credentials(env)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    secrets.ensure_credentials(env)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_a_url_with_its_own_password_gets_no_secret_and_a_named_user_gets_its_own(tmp_path):
    env = _env(tmp_path, DATABASE_URL="postgresql://app@127.0.0.1/chrono",
               REDIS_URL="redis://:given@127.0.0.1:6379/0")
    stored = read_credentials(secrets.ensure_credentials(env))
    assert stored.database.user == "app"
    assert stored.redis is None
    # The URL now names another user: that user gets a secret of its own.
    env["DATABASE_URL"] = "postgresql://other@127.0.0.1/chrono"
    assert read_credentials(secrets.ensure_credentials(env)).database.user == "other"


def test_rotate_replaces_the_named_services_passwords_only(tmp_path):
    env = _env(tmp_path)
    before = read_credentials(secrets.ensure_credentials(env))
    assert secrets.rotate_credentials(["redis", "search"], env) == ["redis", "search"]
    after = read_credentials(credentials_path(env))
    assert after.database == before.database and after.broker == before.broker
    assert after.redis.password != before.redis.password
    assert after.search.password != before.search.password
    with pytest.raises(ServiceConfigError, match="no service mysql; choose among postgresql"):
        secrets.rotate_credentials(["mysql"], env)


def test_a_rewrite_keeps_an_operators_owner_and_group_but_never_world_access(tmp_path):
    env = _env(tmp_path)
    path = secrets.ensure_credentials(env)
    os.chown(path, 65534, 65534)  # nobody:nogroup, as an operator might give it a service user
    path.chmod(0o644)
    secrets.rotate_credentials(["postgresql"], env)
    status = path.stat()
    assert (status.st_uid, status.st_gid) == (65534, 65534)
    assert stat.S_IMODE(status.st_mode) == 0o640
    assert not list(path.parent.glob(".credentials.env.*"))  # no temporary file left behind
