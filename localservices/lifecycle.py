"""Install, start, stop and report Chrono's own PostgreSQL, Redis, RabbitMQ and search engine.

``up`` first gives the credentials file a secret for every service whose URL has none
(:mod:`localservices.secrets`), installs what is missing and brings up, in order, every service
of :func:`registered_services` that does not both answer with its credentials and refuse
clients without them: a stopped one is started, a running one is configured in place
(``provision``), and one that cannot require credentials while it runs is restarted
(``restart_reason``). So ``up`` brings an installation made before credentials existed to them,
and a second ``up`` changes nothing. ``down`` stops the services in reverse order; ``status``
prints one line per service; ``rotate`` gives services new passwords and applies them. A server
of the same kind that is not Chrono's and holds one of its ports (a Debian system instance
started by apt, say) is stopped with a log line; anything else on a needed port is reported,
never killed.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from contextlib import suppress

from localservices import pgcluster
from localservices.base import (
    EVICTION_TIMEOUT_S,
    POLL_INTERVAL_S,
    STARTUP_GRACE_S,
    Service,
    command_line,
    log,
    log_tail,
    make_traversable,
    port_holders,
    process_name,
    run_command,
    terminate,
)
from localservices.clusters import CLUSTER_KINDS, cluster_command
from localservices.config import ServicesConfig
from localservices.errors import PortBusyError, ServiceError, ServiceStartError
from localservices.packages import disable_distribution_units, ensure_packages
from localservices.postgresql import PostgresService
from localservices.rabbitmq import RabbitMQService
from localservices.redis import RedisService
from localservices.search import SearchService
from localservices.secrets import SERVICE_NAMES, ensure_credentials, rotate_credentials


def registered_services(config: ServicesConfig, *, progress_drawn: bool = True
                        ) -> list[Service]:
    """Chrono's services in start order (``down`` stops them in reverse); ``progress_drawn``:
    whether a long step of their start (the search launcher's build) draws its progress on a
    terminal."""
    return [
        PostgresService(endpoint=config.database, data_dir=config.data_dir / "postgres"),
        RedisService(endpoint=config.redis, data_dir=config.data_dir / "redis"),
        RabbitMQService(
            endpoint=config.broker,
            data_dir=config.data_dir / "rabbitmq",
            node_name=config.rabbitmq_node_name,
        ),
        SearchService(endpoint=config.search, data_dir=config.data_dir / "search",
                      progress_drawn=progress_drawn),
    ]


def free_ports(service: Service) -> None:
    """Stop servers of ``service``'s kind that are not Chrono's and hold its ports.

    Anything else on those ports is left alone and reported, since it is not ours to kill.
    """
    for port in service.ports:
        holders = port_holders(port)
        foreign = [pid for pid in holders if not _evictable(service, pid)]
        if foreign:
            raise PortBusyError(
                f"port {port}, needed by {service.name}, is held by pid {foreign[0]} "
                f"({command_line(foreign[0])}); stop it or choose another port in "
                f"{service.url_variable}"
            )
        if holders:
            _evict(service, port, holders)


def _evictable(service: Service, pid: int) -> bool:
    """Whether ``pid`` is another instance of ``service``'s server that ``up`` may stop."""
    return bool(service.debian_service) and process_name(pid) in service.process_names


def _evict(service: Service, port: int, holders: list[int]) -> None:
    log.warning(
        "port %d is held by a %s that is not Chrono's (pid %s: %s); stopping it with "
        "`service %s stop`",
        port,
        service.name,
        holders[0],
        command_line(holders[0]),
        service.debian_service,
    )
    with suppress(ServiceError):
        run_command(["service", service.debian_service, "stop"], timeout_s=EVICTION_TIMEOUT_S * 2)
    for pid in port_holders(port):
        terminate(pid, first_signal=service.stop_signal, what=f"the other {service.name}")
    if port_holders(port):
        raise PortBusyError(
            f"port {port} is still held after stopping the other "
            f"{service.name}; free it by hand or change {service.url_variable}"
        )


def _wait_until(
    service: Service, probe: Callable[[], bool], *, waiting_for: str, hint: str = ""
) -> None:
    """Poll ``probe`` until it holds; fail fast when the process dies, else on timeout."""
    started = time.monotonic()
    while not probe():
        elapsed = time.monotonic() - started
        died = elapsed > STARTUP_GRACE_S and not service.running()
        if died or elapsed > service.start_timeout_s:
            what = "exited" if died else f"did not answer within {service.start_timeout_s:.0f} s"
            raise ServiceStartError(
                f"{service.name} {what} while waiting for {waiting_for} on {service.address}; "
                f"see its log {service.log_path}{hint}\n{log_tail(service.log_path)}"
            )
        time.sleep(POLL_INTERVAL_S)


def secured(service: Service) -> bool:
    """Whether ``service`` answers with its URL's credentials and refuses clients without."""
    return service.answers() and service.refuses_anonymous()


def bring_up(service: Service) -> None:
    """Make ``service`` answer with its URL's credentials and refuse clients without them:
    nothing to do when it already does; else start it, or configure it where it runs, or
    restart it when it cannot require credentials while it runs."""
    if secured(service):
        log.info("%s already answers on %s, with credentials", service.name, service.address)
        return
    if service.running() and (reason := service.restart_reason()):
        log.warning("restarting %s: %s", service.name, reason)
        service.stop()
    was_running = service.running()
    if not was_running:
        free_ports(service)
        service.start()
    log.info("waiting for %s on %s", service.name, service.address)
    _wait_until(service, service.ready, waiting_for="the server")
    service.provision()
    hint = ""
    if was_running:
        hint = (
            f" (it was already running: if {service.url_variable} changed since it started, "
            "run `chrono services down` and `up` again)"
        )
    _wait_until(service, service.answers, waiting_for=service.url_variable, hint=hint)
    if not service.refuses_anonymous():
        raise ServiceStartError(
            f"{service.name} on {service.address} still lets clients in without the "
            f"credentials of {service.url_variable}; see its log {service.log_path}"
        )
    log.info("%s is up on %s, with credentials", service.name, service.address)


def up(*, config: ServicesConfig | None = None, progress_drawn: bool = True) -> None:
    """Generate missing credentials, install what is missing, and bring up every service that
    does not answer with its credentials or still lets clients in without them.

    With ``config`` given, its endpoints are used as they are (no credentials generated). The
    long steps (apt-get, the search launcher's Maven build) draw their progress on a terminal
    unless not ``progress_drawn``; off a terminal, or without, their phases are log lines.
    """
    if config is None:
        ensure_credentials()
        config = ServicesConfig.from_env()
    services = registered_services(config, progress_drawn=progress_drawn)
    if all(secured(service) for service in services):
        log.info("all services already answer, with credentials")
        _disable_distribution_units(services)
        return
    ensure_packages([package for service in services for package in service.packages],
                    progress_drawn=progress_drawn)
    _disable_distribution_units(services)
    make_traversable(config.data_dir)
    for service in services:
        bring_up(service)


def _disable_distribution_units(services: list[Service]) -> None:
    disable_distribution_units([service.debian_service for service in services
                                if service.debian_service])


def down(*, config: ServicesConfig | None = None) -> None:
    """Stop every service, last started first; those already stopped are skipped."""
    for service in reversed(registered_services(config or ServicesConfig.from_env())):
        service.stop()


def status(*, config: ServicesConfig | None = None) -> dict[str, bool]:
    """Print one line per service and return whether each answers."""
    answers = {}
    for service in registered_services(config or ServicesConfig.from_env()):
        answers[service.name] = service.answers()
        state = "up" if answers[service.name] else "down"
        print(f"{service.name:<12}{state:<6}{service.address}")
    return answers


def rotate(services: list[str]) -> None:
    """New passwords for ``services`` (all when empty) in the credentials file, applied to the
    running servers by ``up``. Chrono's processes read credentials when they start: restart
    them afterwards."""
    rotated = rotate_credentials(services)
    if not rotated:
        return
    up()
    log.warning(
        "rotated the credentials of %s: restart every Chrono process (web, beat, workers, "
        "reaper, indexer), which keep the old ones until they start again",
        ", ".join(rotated),
    )


CLUSTER_COMMANDS = ("cluster-up", "cluster-down")


def _ports(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ports {text!r}: give port numbers separated by "
                                         "commas, e.g. 5701,5702,5703") from None
    if len(ports) < 3 or any(not 1024 <= port <= 45535 for port in ports):
        raise argparse.ArgumentTypeError(
            f"--ports {text!r}: a cluster needs at least 3 ports, each 1024 to 45535 (its "
            "Erlang distribution port is 20000 above it)")
    return ports


# How each kind of cluster reads its --ports.
CLUSTER_PORTS: dict[str, Callable[[str], tuple[int, ...]]] = {
    "rabbitmq": _ports, "redis": _ports, "postgresql": pgcluster.parse_ports}


def main(argv: list[str] | None = None) -> int:
    """``python -m localservices up|down|status|rotate|cluster-up|cluster-down``; exit 1 on
    error or a service down."""
    parser = argparse.ArgumentParser(prog="chrono services", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("up", "down", "status", "rotate", *CLUSTER_COMMANDS))
    parser.add_argument(
        "services",
        nargs="*",
        metavar="SERVICE",
        help=f"rotate: which of {', '.join(SERVICE_NAMES)} (default: all); cluster-up and "
             f"cluster-down: which of {', '.join(CLUSTER_KINDS)}",
    )
    parser.add_argument(
        "--ports", default=None,
        help="cluster-up of one kind: the ports of a new cluster's servers, comma-separated "
             "(rabbitmq: AMQP, default 5701,5702,5703; redis: 3 primaries then their replicas, "
             "default 7101,…,7106; postgresql: the primary's and the standby's, default "
             "5501,5502)",
    )
    parser.add_argument(
        "--no-progress", action="store_false", dest="progress",
        help="up: draw no progress of apt and Maven on a terminal, log their phases instead "
             "(as off a terminal)",
    )
    args = parser.parse_args(argv)
    if args.command in CLUSTER_COMMANDS:
        if not args.services or set(args.services) - set(CLUSTER_KINDS):
            parser.error(f"{args.command} takes one or more of {', '.join(CLUSTER_KINDS)}")
    elif args.services and args.command != "rotate":
        parser.error(f"{args.command} takes no service names; only rotate does")
    if args.ports is not None:
        if args.command != "cluster-up" or len(args.services) != 1:
            parser.error("--ports goes with cluster-up of one kind")
        try:
            args.ports = CLUSTER_PORTS[args.services[0]](args.ports)
        except argparse.ArgumentTypeError as error:
            parser.error(str(error))
    if not args.progress and args.command != "up":
        parser.error(f"{args.command} draws no progress; --no-progress is for up")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s services: %(message)s", datefmt="%H:%M:%S"
    )
    try:
        if args.command == "status":
            return 0 if all(status().values()) else 1
        if args.command in CLUSTER_COMMANDS:
            return cluster_command(args.command, args.services, ports=args.ports)
        if args.command == "rotate":
            rotate(args.services)
        elif args.command == "up":
            up(progress_drawn=args.progress)
        else:
            down()
    except ServiceError as error:
        log.error("%s", error)
        return 1
    return 0
