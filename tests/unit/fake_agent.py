"""A stand-in for L1's guest agent in unit tests of the rig: a socket that speaks the agent's framing
(a request per line, a leading 0xFF before a sync), answers guest-sync-delimited and guest-exec, and
answers guest-exec-status with `status`, or never where it is None (a hung agent). The real agent is
tested in tests/integration/test_rig.py."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def fake_agent(path: Path, status: Mapping[str, object] | None) -> Iterator[None]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rb") as lines:
            for raw in lines:
                request = json.loads(raw.strip(b"\xff"))
                command, args = request["execute"], request.get("arguments", {})
                if command == "guest-sync-delimited":
                    reply: object = args["id"]
                elif command == "guest-exec":
                    reply = {"pid": 7}
                elif status is not None:
                    reply = dict(status)
                else:
                    continue  # silent: a hung agent
                conn.sendall(json.dumps({"return": reply}).encode() + b"\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield
    finally:
        server.close()
