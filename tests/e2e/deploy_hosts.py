"""Several "hosts" on one machine for the many-hosts tests: network namespaces, each linked to
the machine by a veth pair, and a userspace TCP forwarder that serves the shared services on the
machine's end of each link.

The services listen on 127.0.0.1 only and are shared with other test runs, so they are never
reconfigured: a process in a namespace reaches them at its link's far address (``gateway``),
where :class:`Forwarder` accepts the connection and relays it to 127.0.0.1. The forwarder is a
few lines of asyncio in the test process rather than socat: nothing to install, it stops with
the test, and it counts the connections it relays by client address, which is how a test proves
that each process really used its own non-loopback URLs.

Addresses come from 198.18.0.0/15 (RFC 2544's benchmarking range, reserved for tests like this
one), one /30 per host, on a third octet no interface of the machine uses yet; names carry a
random tag, so two runs side by side do not meet. Creating namespaces takes root and iproute2
(``ensure_packages`` installs it where missing).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import random
import secrets
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

NETWORK = ipaddress.ip_network("198.18.0.0/15")
RELAY_CHUNK_BYTES = 65_536


@dataclass(frozen=True)
class Host:
    """One network namespace: its name, its own address and the machine's end of its link."""

    namespace: str
    address: str
    gateway: str

    @property
    def wrapper(self) -> tuple[str, ...]:
        """The command prefix that runs a process inside this host (``ProcessGroup.start``)."""
        return ("ip", "netns", "exec", self.namespace)


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")


def _used_third_octets() -> set[int]:
    listing = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    used = set()
    for line in listing.splitlines():
        address = ipaddress.ip_interface(line.split()[3]).ip
        if address in NETWORK:
            used.add(int(address) >> 8 & 0x1FF)
    return used


@contextmanager
def network_hosts(count: int) -> Iterator[list[Host]]:
    """``count`` namespaces, each with loopback up and a /30 link to the machine; removed on
    the way out (deleting a namespace deletes its end of the veth pair, and so the pair)."""
    if os.geteuid() != 0:
        raise RuntimeError("the many-hosts tests create network namespaces: run them as root")
    from localservices.packages import ensure_packages

    ensure_packages(["iproute2"])
    free = sorted(set(range(512)) - _used_third_octets())
    block = random.choice(free)  # noqa: S311 - picks a test subnet, not a secret
    base = int(NETWORK.network_address) + (block << 8)
    tag = secrets.token_hex(3)
    hosts, created = [], []
    try:
        for index in range(count):
            namespace = f"chrono-{tag}-{index}"
            outside, inside = f"c{tag}{index}h", f"c{tag}{index}n"  # 15 characters at most
            gateway = str(ipaddress.ip_address(base + 4 * index + 1))
            address = str(ipaddress.ip_address(base + 4 * index + 2))
            _ip("netns", "add", namespace)
            created.append(namespace)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", namespace)
            _ip("addr", "add", f"{gateway}/30", "dev", outside)
            _ip("link", "set", outside, "up")
            _ip("-n", namespace, "addr", "add", f"{address}/30", "dev", inside)
            _ip("-n", namespace, "link", "set", inside, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            hosts.append(Host(namespace=namespace, address=address, gateway=gateway))
        yield hosts
    finally:
        for namespace in created:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)


class Forwarder:
    """TCP listeners that relay every connection to a port on 127.0.0.1, on a thread of their
    own; ``connections`` counts what was relayed by (client address, target port)."""

    def __init__(self) -> None:
        self.connections: Counter[tuple[str, int]] = Counter()
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._relays: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="forwarder",
                                        daemon=True)
        self._thread.start()

    def listen(self, address: str, port: int, target_port: int) -> None:
        """Accept on ``address:port`` and relay to ``127.0.0.1:target_port``."""

        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                lambda reader, writer: self._accept(reader, writer, target_port), address, port)

        server = asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=10)
        self._servers.append(server)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      target_port: int) -> None:
        client = writer.get_extra_info("peername")[0]
        self.connections[(client, target_port)] += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1",
                                                                             target_port)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            task = asyncio.ensure_future(self._pipe(source, sink))
            self._relays.add(task)
            task.add_done_callback(self._relays.discard)

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(RELAY_CHUNK_BYTES):
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            sink.close()

    def close(self) -> None:
        async def shut() -> None:
            for server in self._servers:
                server.close()
            for task in list(self._relays):
                task.cancel()
            await asyncio.gather(*self._relays, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
