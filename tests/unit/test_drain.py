"""The wait after an open-loop point until the server has answered what it was sent (Server.drain), with
real sockets on this machine and the real `ss`: a connection the server still holds (open, or closed by
its client and not yet by the server) keeps it waiting until its deadline and is said; none, and it goes
on at once. The negative control: a client that keeps its side open after the server closed its own
(the connection's destination port the server's) leaves the server nothing to do."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from vmharness.bench.server import Server, ServerConfig
from vmharness.system.machine import Machine


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield s
    finally:
        s.close()


def _server() -> Server:
    return Server(Machine(), ServerConfig(), owner="run:test")


def test_an_idle_server_is_drained_at_once(listening: socket.socket) -> None:
    began = time.monotonic()
    assert _server().drain(listening.getsockname()[1], timeout=5) is None
    assert time.monotonic() - began < 3


def test_a_connection_the_server_holds_is_waited_for_then_said(listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listening.accept()
    try:
        began = time.monotonic()
        why = _server().drain(port, timeout=1)
        assert why is not None and "still held 1 connections 1 s after the load" in why, why
        assert time.monotonic() - began >= 1
        client.close()  # the client is gone; the server has not closed its side: still its work
        why = _server().drain(port, timeout=1)
        assert why is not None and "still held 1 connections" in why, why
        served.close()
        assert _server().drain(port, timeout=5) is None
    finally:
        client.close()
        served.close()


def test_a_client_that_lingers_after_the_server_closed_is_not_the_servers_work(listening: socket.socket) -> None:
    client = socket.create_connection(listening.getsockname())
    served, _ = listening.accept()
    try:  # the server has answered and closed; the client's side, still open, has the port as its destination
        served.close()
        assert _server().drain(listening.getsockname()[1], timeout=1) is None
    finally:
        client.close()


def test_the_port_drained_is_the_servers_own_not_a_proxys_in_the_url() -> None:
    """test_delay.py's client reaches the server through a delaying proxy: the URL names the proxy's port."""
    srv = Server(Machine(), ServerConfig(listen="127.0.0.1:18312"), owner="run:test")
    assert srv.port("http://127.0.0.1:18313/") == 18312
    assert Server(Machine(), ServerConfig(listen="[::1]:8081"), owner="run:test").port("http://[::1]:9/") == 8081
    # the researcher's own nginx.conf listens where it says, which the harness does not read: the URL's port
    theirs = Server(Machine(), ServerConfig(config="/etc/nginx/nginx.conf"), owner="run:test")
    assert theirs.port("http://198.18.1.2:8088/") == 8088 and theirs.port("http://198.18.1.2/") == 80
