"""nginx started and stopped on its machine by one command each (bench/server.py: a command on a guest
under TCG costs about a second, and a run starts a server at every boot), with the real nginx on this
machine: it answers with the file it should; a configuration nginx refuses and a port already taken are
each said as before, in one line; the stop leaves no process and no folder, and gives its journal
record back."""

from __future__ import annotations

import secrets
import socket
import urllib.request
from pathlib import Path

import pytest

from vmharness.bench.server import Server, ServerConfig
from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.system.machine import Machine, alive
from vmharness.system.root import HostRoot


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(port: int, **kw: object) -> Server:
    prefix = f"/tmp/vmharness-nginx-{secrets.token_hex(5)}-t"
    return Server(Machine(), ServerConfig(listen=f"127.0.0.1:{port}", prefix=prefix, workers=1, **kw),  # type: ignore[arg-type]
                  owner="run:test")


@pytest.fixture
def root(tmp_path: Path) -> HostRoot:
    return HostRoot(tmp_path, allow_writes=True)


def test_a_started_server_answers_and_its_stop_leaves_nothing(root: HostRoot) -> None:
    port = _free_port()
    srv = _server(port, filesize=300)
    srv.start(root)
    try:
        assert srv.pid > 0 and alive(Machine(), srv.pid)
        assert len(journal.outstanding(journal.read(root))) == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.status == 200 and r.read() == b"x" * 300
    finally:
        pid, prefix = srv.pid, srv.cfg.prefix
        srv.stop(root)
    assert not alive(Machine(), pid) and not Path(prefix).exists()
    assert journal.outstanding(journal.read(root)) == []


def test_a_port_already_taken_is_named_and_nothing_is_left(root: HostRoot) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        srv = _server(held.getsockname()[1])
        with pytest.raises(HarnessError, match=rf"port {held.getsockname()[1]} \(127\.0\.0\.1:\d+\) on this machine "
                                               r"is taken: held by pid \d+"):
            srv.start(root)
    assert not Path(srv.cfg.prefix).exists() and journal.outstanding(journal.read(root)) == []


def test_a_configuration_nginx_refuses_is_said_in_its_own_words(root: HostRoot, tmp_path: Path) -> None:
    conf = tmp_path / "nginx.conf"
    conf.write_text("events {}\nhttp { server { listen 127.0.0.1:1; no_such_directive on; } }\n")
    srv = _server(_free_port(), config=str(conf))
    with pytest.raises(HarnessError, match=r"nginx refuses its configuration on this machine: .*"
                                           r"unknown directive \"no_such_directive\""):
        srv.start(root)
    assert not Path(srv.cfg.prefix).exists() and journal.outstanding(journal.read(root)) == []
