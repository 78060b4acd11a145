"""A stand-in for L1's guest agent in unit tests of the rig: a socket that speaks the agent's framing
(a request per line, a leading 0xFF before a sync), answers guest-sync-delimited and guest-exec, and
answers guest-exec-status with `status`, or never where it is None (a hung agent), and gives each file of
`files` (path: what a read of it returns, one read after another) to guest-file-open and guest-file-read.
The real agent is tested in tests/integration/test_rig.py."""

from __future__ import annotations

import base64
import itertools
import json
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def fake_agent(path: Path, status: Mapping[str, object] | None,
               files: Mapping[str, Sequence[bytes]] | None = None) -> Iterator[None]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    reads = {name: list(texts) for name, texts in (files or {}).items()}
    opened: dict[int, bytes] = {}
    handles = itertools.count(1)

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
                elif command == "guest-file-open" and args["path"] in reads:
                    texts = reads[args["path"]]
                    handle = next(handles)
                    opened[handle] = texts.pop(0) if len(texts) > 1 else texts[0]
                    reply = handle
                elif command == "guest-file-read":
                    data = opened.pop(args["handle"], b"")
                    reply = {"count": len(data), "buf-b64": base64.b64encode(data).decode(), "eof": True}
                elif command == "guest-file-close":
                    reply = {}
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
