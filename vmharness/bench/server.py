"""The webserver under test: nginx from guest-setup/nginx.conf.template (or the researcher's own
binary and config), started on any machine, checked with a real request, stopped by its PID.

nginx daemonizes and writes its master's PID into the prefix; that PID, with its start time, is
journaled, so a crashed harness leaves `host-restore` enough to stop exactly this process.
"""

from __future__ import annotations

import json
import string
import time
from dataclasses import dataclass
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.host import journal
from vmharness.host.root import HostRoot
from vmharness.machine import Machine, start_time, stop_process

TEMPLATE = Path(__file__).resolve().parents[2] / "guest-setup" / "nginx.conf.template"
FILE = "index.bin"


@dataclass(frozen=True)
class ServerConfig:
    binary: str = "nginx"
    config: str | None = None  # the researcher's nginx.conf, used as it is (it must not set `pid`)
    workers: int | None = None  # None: one per CPU of the server
    worker_connections: int = 1024
    filesize: int = 64
    mode: str = "file"  # "file": serve `filesize` bytes; "return": `return 200` with no body
    listen: str = "127.0.0.1:8080"
    prefix: str = "/tmp/vmharness-nginx"

    def expected_length(self) -> int | None:
        if self.config is not None:
            return None
        return self.filesize if self.mode == "file" else 0


def render(cfg: ServerConfig) -> str:
    location = f"try_files /{FILE} =404;" if cfg.mode == "file" else "return 200;"
    return string.Template(TEMPLATE.read_text()).substitute(
        workers=cfg.workers or "auto",  # auto: nginx starts one per CPU it may run on
        worker_connections=cfg.worker_connections, prefix=cfg.prefix, listen=cfg.listen,
        location=location, nofile=2 * cfg.worker_connections + 256)  # a client and an upstream side each


def write_file(machine: Machine, path: str, content: str) -> None:
    machine.run(["sh", "-c", 'cat > "$1"', "sh", path], timeout=30, input=content)


# One round trip to lay out the prefix: $1 the prefix, $2 the file's size in bytes; the configuration
# comes on stdin. (A round trip to a guest under TCG costs seconds.)
_LAYOUT = """set -e
rm -rf -- "$1"
mkdir -p "$1/www" "$1/tmp"
cat > "$1/nginx.conf"
head -c "$2" /dev/zero | tr '\\0' x > "$1/www/index.bin"
"""


@dataclass
class Server:
    machine: Machine
    cfg: ServerConfig
    pid: int = 0
    seq: int = 0
    owner: str = ""  # the run directory it serves, so a resumed run can stop what a crashed one left

    def start(self, root: HostRoot) -> None:
        m, cfg = self.machine, self.cfg
        if cfg.mode not in ("file", "return"):
            raise HarnessError(f"server mode {cfg.mode!r} is unknown", "use file or return")
        conf = f"{cfg.prefix}/nginx.conf"
        text = render(cfg) if cfg.config is None else Path(cfg.config).read_text()
        m.run(["sh", "-c", _LAYOUT, "sh", cfg.prefix, str(cfg.filesize)], timeout=30, input=text)
        extra = [] if cfg.config is None else ["-g", f"pid {cfg.prefix}/nginx.pid;"]
        argv = [cfg.binary, "-p", f"{cfg.prefix}/", "-c", conf, *extra]
        test = m.run([*argv, "-t"], timeout=30, check=False)
        if not test.ok:
            last = (test.stderr.strip() or test.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise HarnessError(f"nginx refuses its configuration on {m.label}: {last[0]}",
                               f"the configuration is {conf} there")
        started = m.run(argv, timeout=30, check=False)
        if not started.ok:
            raise HarnessError(f"nginx did not start on {m.label}: {started.stderr.strip()[-200:]}",
                               f"is {cfg.listen} free? see {cfg.prefix}/error.log there")
        self.pid = self._read_pid()
        if m.guest:  # it ends with the guest, whose domain is journaled
            return
        rec = journal.record(root, {"op": "process", "what": "nginx", "ssh": m.ssh, "pid": self.pid,
                                    "start_time": start_time(m, self.pid), "run": self.owner})
        self.seq = rec["seq"]

    def _read_pid(self, timeout: float = 10) -> int:
        deadline = time.monotonic() + timeout * self.machine.patience
        while time.monotonic() < deadline:
            res = self.machine.run(["cat", f"{self.cfg.prefix}/nginx.pid"], timeout=15, check=False)
            if res.ok and res.stdout.strip().isdigit():
                return int(res.stdout.strip())
            time.sleep(0.1)
        raise HarnessError(f"nginx wrote no PID file on {self.machine.label}", f"see {self.cfg.prefix}/error.log")

    def stop(self, root: HostRoot, grace: float = 10) -> None:
        if not self.pid:
            return
        stop_process(self.machine, self.pid, grace)
        if self.seq:
            journal.release(root, [self.seq])
        self.pid = 0


# Run on a client machine: one GET, its status, body length and Content-Length (argv: the URL).
_CHECK = """import json, sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
    status, body, length = r.status, r.read(), r.headers.get("Content-Length")
except urllib.error.HTTPError as e:
    status, body, length = e.code, e.read(), e.headers.get("Content-Length")
except OSError as e:
    print(json.dumps({"error": str(e)})); sys.exit(0)
print(json.dumps({"status": status, "length": len(body), "content_length": length}))
"""


def check(client: Machine, url: str, expected_length: int | None) -> dict[str, object]:
    """A real request from a client before anything is measured: 200, and the body the server should send."""
    res = client.run(["python3", "-c", _CHECK, url], timeout=30)
    answer = json.loads(res.stdout)
    where = f"{url} (asked from {client.label})"
    if "error" in answer:
        raise HarnessError(f"the server does not answer at {where}: {answer['error']}",
                           "is it listening on an address the client can reach?")
    if answer["status"] != 200:
        raise HarnessError(f"the server answers {answer['status']} at {where}, not 200", "check the URL's path")
    if expected_length is not None and (answer["length"] != expected_length
                                        or answer["content_length"] != str(expected_length)):
        raise HarnessError(f"the server sent {answer['length']} bytes (Content-Length {answer['content_length']}) "
                           f"at {where}, not {expected_length}", "is another server on that port?")
    return dict(answer)
