"""The webserver under test: nginx from vmharness/data/guest-setup/nginx.conf.template (or the researcher's own
binary and config), started on any machine, checked with a real request, stopped by its PID.

Its prefix (a temporary folder in /tmp named for the run's id and the instance) is journaled before
it is laid out, with the run as owner: nginx daemonizes and writes its master's PID into the prefix,
and the undo (`server` op, registered here) stops that PID only if its command line names exactly
this prefix, then removes the folder. A crashed harness so leaves the next run or `host-restore`
enough to stop exactly this nginx and nothing else. A server in a guest ends with its guest.
"""

from __future__ import annotations

import json
import posixpath
import re
import string
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from vmharness import data, userfile
from vmharness.bench import ports
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.journal.journal import Op
from vmharness.journal.kinds import OpKind
from vmharness.signals import shielded
from vmharness.system.machine import Machine, stop_process
from vmharness.system.root import HostRoot

if TYPE_CHECKING:
    from vmharness.model.sections import InstanceSection

TEMPLATE = data.NGINX_TEMPLATE
FILE = "index.bin"
MAX_CONFIG = 1 << 20  # bytes: an nginx.conf is a few KiB


def config_text(path: str, key: str) -> str:
    """A researcher's nginx.conf (`key` names the setting): a regular UTF-8 file of at most
    MAX_CONFIG bytes, read here and sent to the server's machine."""
    return userfile.text(Path(path), MAX_CONFIG, "name an nginx.conf (instance.config)", key=key)


def check_configs(instances: Iterable[InstanceSection]) -> None:
    """Each instance's own nginx.conf read once before any work, so a bad one is said first."""
    for inst in instances:
        if inst.config:
            config_text(inst.config, f"instance {inst.name}: config")


@dataclass(frozen=True)
class ServerConfig:
    binary: str = "nginx"
    config: str | None = None  # the researcher's nginx.conf, used as it is (it must not set `pid`)
    workers: int | None = None  # None: one per CPU of the server
    worker_connections: int = 1024
    filesize: int = 64
    mode: str = "file"  # "file": serve `filesize` bytes; "return": `return 200` with no body
    listen: str = "127.0.0.1:8080"
    prefix: str = "/tmp/vmharness-nginx"  # see prefix_for

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


PARENT = "/tmp"
_EMERG = re.compile(r"^\s*(\d+#\d+:\s*)?")  # what follows "[emerg]": the error log's "PID#TID: ", if any
_PREFIX = re.compile(r"vmharness-nginx-[A-Za-z0-9][A-Za-z0-9._-]{0,160}")


def prefix_for(run_id: str, instance: str) -> str:
    """The server's folder for one instance of one run: /tmp/vmharness-nginx-RUNID-INSTANCE."""
    return check_prefix(f"{PARENT}/vmharness-nginx-{run_id}-{instance}")


def check_prefix(prefix: str) -> str:
    """A prefix is removed with `rm -rf`: it must be one folder right inside /tmp, named as ours are."""
    if (posixpath.dirname(prefix) != PARENT or posixpath.normpath(prefix) != prefix
            or not _PREFIX.fullmatch(posixpath.basename(prefix))):
        raise HarnessError(f"server folder {prefix!r} is not a vmharness-nginx-* folder right inside {PARENT}",
                           "instance names are letters, digits, '.', '_' and '-'")
    return prefix


# One round trip to start a server (a command on a guest under TCG costs about a second): $1 the prefix,
# $2 the file's size in bytes, $3 tenths of a second to wait for the PID file, then nginx's argv; the
# configuration comes on stdin. The prefix is laid out, nginx checks its configuration (exit 10, what it
# said on stderr) and starts (exit 11, its stderr), and the PID file's first bytes are printed (exit 12:
# none came, or it is not a regular file).
_START = """set -e
p=$1; size=$2; tenths=$3; shift 3
rm -rf -- "$p"
mkdir -p "$p/www" "$p/tmp"
cat > "$p/nginx.conf"
head -c "$size" /dev/zero | tr '\\0' x > "$p/www/index.bin"
set +e
"$@" -t > "$p/test.log" 2>&1 || { cat -- "$p/test.log" >&2; exit 10; }
"$@" || exit 11
while [ "$tenths" -gt 0 ]; do
    if [ -f "$p/nginx.pid" ] && [ -s "$p/nginx.pid" ]; then exec head -c 64 -- "$p/nginx.pid"; fi
    tenths=$((tenths - 1))
    sleep 0.1
done
exit 12
"""

# One round trip to stop one: $1 the prefix, $2 tenths of a second of grace after SIGTERM. The PID in
# its file is stopped only if that process's command line names exactly this prefix (a master rewrites
# its argv into one string: "nginx: master process nginx -p PREFIX/ -c ..."), SIGKILL after the grace;
# the folder is then removed. Exit 3, the PID printed: it did not stop (the folder, which holds its PID
# file, is kept).
_STOP = """p=$1; tenths=$2; pid=
[ -f "$p/nginx.pid" ] && read -r pid < "$p/nginx.pid"
case "$pid" in ''|*[!0-9]*) pid= ;; esac
alive() { read -r st < "/proc/$pid/stat" 2>/dev/null || return 1; st=${st##*) }; case "$st" in Z*|X*) return 1;; esac; }
if [ -n "$pid" ] && [ -f "/proc/$pid/cmdline" ]; then
    case " $(tr '\\0' ' ' < "/proc/$pid/cmdline") " in
    *" $p/ "*)
        kill -TERM "$pid" 2>/dev/null
        while alive && [ "$tenths" -gt 0 ]; do tenths=$((tenths - 1)); sleep 0.1; done
        if alive; then kill -KILL "$pid" 2>/dev/null; sleep 0.5; fi
        if alive; then echo "$pid"; exit 3; fi;;
    esac
fi
exec rm -rf -- "$p"
"""


@dataclass
class Server:
    machine: Machine
    cfg: ServerConfig
    owner: str  # the run it serves (journal owner), so that the next run can stop what a dead one left
    pid: int = 0
    seq: int = 0

    def start(self, root: HostRoot) -> None:
        """Lay out the prefix and start nginx; on any failure or signal, give back what was taken."""
        m, cfg = self.machine, self.cfg
        if cfg.mode not in ("file", "return"):
            raise HarnessError(f"server mode {cfg.mode!r} is unknown", "use file or return")
        check_prefix(cfg.prefix)
        if not m.guest:  # one in a guest ends with the guest, whose domain is journaled
            with shielded():  # the record and self.seq together: stop() releases what it knows of
                self.seq = journal.record(root, {"op": OpKind.SERVER, "prefix": cfg.prefix, "ssh": m.ssh},
                                          self.owner)["seq"]
        try:
            self._start()
        except BaseException:
            self.stop(root)
            raise

    def _start(self, pid_wait: float = 10) -> None:
        m, cfg = self.machine, self.cfg
        conf = f"{cfg.prefix}/nginx.conf"
        text = render(cfg) if cfg.config is None else config_text(cfg.config, "the nginx configuration")
        # The researcher's own configuration: its PID file and its start-up log go into the prefix,
        # whatever it says (nginx's default, logs/error.log, is a folder the prefix does not have).
        extra = [] if cfg.config is None else ["-e", f"{cfg.prefix}/error.log", "-g", f"pid {cfg.prefix}/nginx.pid;"]
        tenths = round(10 * pid_wait * m.patience)
        res = m.run(["sh", "-c", _START, "sh", cfg.prefix, str(cfg.filesize), str(tenths),
                     cfg.binary, "-p", f"{cfg.prefix}/", "-c", conf, *extra],
                    timeout=60 + tenths / 10, check=False, input=text)
        if res.returncode == 10:  # its [emerg] line says why; the last only that the test failed
            said = res.stderr.strip().splitlines() or ["no output"]
            why = next((_EMERG.sub("", line.split("[emerg]", 1)[1]) for line in said if "[emerg]" in line), said[-1])
            raise HarnessError(f"nginx refuses its configuration on {m.label}: {why}",
                               f"the configuration is {conf} there")
        if res.returncode == 11 and (address := ports.taken(res.stderr)) is not None:
            raise ports.in_use_error(m, address, "guest.port" if m.guest else "server.listen and server.url")
        if res.returncode == 11:
            raise HarnessError(f"nginx did not start on {m.label}: {res.stderr.strip()[-200:]}",
                               f"is {cfg.listen} free? (nginx logs to {cfg.prefix}/error.log)")
        if res.returncode == 12 or (res.ok and not is_digits(res.stdout.strip())):
            raise HarnessError(f"nginx wrote no PID file on {m.label}", f"see {cfg.prefix}/error.log")
        if not res.ok:
            raise res.failure(f"starting nginx in {cfg.prefix} on {m.label}: ")
        self.pid = int(res.stdout.strip())

    def port(self, url: str) -> int:
        """The port its clients' connections arrive on: the template's `listen`, or with the
        researcher's own nginx.conf, whose listen the harness does not read, the port of `url` (which
        may instead be a proxy's in front of it)."""
        if self.cfg.config is None:
            return int(self.cfg.listen.rpartition(":")[2])
        return urlsplit(url).port or 80

    def drain(self, port: int, timeout: float) -> str | None:
        """Wait until the server holds no connection on `port` that a client opened (open, closed by
        the client but not yet by the server, or being accepted), so that what an open-loop generator
        sent faster than it was answered is answered before the next point begins; why not, if not."""
        deadline = time.monotonic() + timeout * self.machine.patience
        argv = ["ss", "-Htn", *(w for state in ("established", "close-wait", "syn-recv") for w in ("state", state)),
                f"( sport = :{port} )"]
        while (res := self.machine.run(argv, timeout=30, check=False)).ok and res.stdout.strip():
            if time.monotonic() > deadline:
                return (f"the server on {self.machine.label} still held {len(res.stdout.splitlines())} connections "
                        f"{timeout:.0f} s after the load: the next point begins with its backlog")
            time.sleep(0.2)
        return None if res.ok else f"cannot tell whether the server on {self.machine.label} is idle: " \
                                   f"ss: {res.stderr.strip()[-200:] or 'failed'}"

    def stop(self, root: HostRoot, grace: float = 10) -> None:
        """Stop it and remove its folder (a signal meanwhile waits until that is done)."""
        with shielded():
            _stop(self.machine, self.cfg.prefix, grace)
            if self.seq:
                journal.release(root, [self.seq])
            self.pid = self.seq = 0


def _stop(m: Machine, prefix: str, grace: float) -> None:
    """Stop the nginx master of `prefix` (_STOP, one command), then remove the folder."""
    check_prefix(prefix)
    tenths = round(10 * grace)
    res = m.run(["sh", "-c", _STOP, "sh", prefix, str(tenths)], timeout=60 + grace, check=False)
    if res.returncode == 3:
        raise HarnessError(f"nginx (pid {res.stdout.strip()[:20]}) of {prefix} did not stop",
                           "stop it by hand, then host-restore")
    if not res.ok:
        raise res.failure(f"stopping the nginx of {prefix} on {m.label}: ")


def _describe(rec: dict[str, Any]) -> str:
    return f"stop the nginx of {rec['prefix']} and remove it" + (f" on {rec['ssh']}" if rec.get("ssh") else "")


def _undo(root: HostRoot, rec: dict[str, Any]) -> list[str]:
    _stop(Machine(rec.get("ssh")), rec["prefix"], 10)
    return []


journal.register(OpKind.SERVER, Op(_describe, _undo, ("prefix", "ssh")))


# Journals written before servers were recorded by their folder hold `process` records (a PID and its
# start time); /run is kept until a reboot, so a machine can still hold one: it is still given back.
def _describe_process(rec: dict[str, Any]) -> str:
    return f"stop {rec['what']} (pid {rec['pid']}" + (f" on {rec['ssh']})" if rec.get("ssh") else ")")


def _undo_process(root: HostRoot, rec: dict[str, Any]) -> list[str]:
    if rec.get("start_time"):  # without it, the PID could name another process by now
        stop_process(Machine(rec.get("ssh")), rec["pid"], 10, rec["start_time"])
    return []


journal.register(OpKind.PROCESS, Op(_describe_process, _undo_process, ("what", "pid", "ssh")))


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
