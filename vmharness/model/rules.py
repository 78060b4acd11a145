"""The rules that span settings, checked once a whole configuration is read (each setting alone was
checked as it was read, model/checks.py): names unique, iteration bounds in order, threads that the
connection counts can share, a tuning profile that loads, and for run the settings a guest decides and
the files and folders it boots from. Said before anything is built, booted or changed on a host."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from vmharness.errors import HarnessError
from vmharness.model import connections as conn_spec
from vmharness.model import profile
from vmharness.model.hostboots import check_host_boots
from vmharness.model.sections import BenchConfig, RunConfig, ServerSection
from vmharness.model.wire import wire

C = TypeVar("C", bound=BenchConfig)  # validate() returns what it is given


def validate(cfg: C) -> C:
    """The rules that span settings (each setting alone was checked when it was read)."""
    s = cfg.sweep
    cfg.counts  # noqa: B018 - parses the list, raising on a malformed one
    checks = [
        (s.max_iterations >= s.iterations, "sweep.max_iterations must be at least sweep.iterations"),
        (len({i.name for i in cfg.instance}) == len(cfg.instance), "instance names must be different"),
        (len(set(cfg.load.percents)) == len(cfg.load.percents), "load.percents must be different"),
    ]
    for ok, message in checks:
        if not ok:
            raise HarnessError(message, "fix the configuration file")
    for c in cfg.client:
        if c.threads:
            conn_spec.check_threads(cfg.counts, c.threads * len(cfg.client))
    profile.load(cfg.tuning.profile)  # a bad profile is said now, not after the image and the host are ready
    if isinstance(cfg, RunConfig):
        _validate_run(cfg)
    else:
        for i in cfg.instance:
            for key in ("cmdline", "kernel", "initrd", "image", "profile", "cpu_features", "claim_unmitigated",
                        "qemu_args", "qemu", "kvm_modules", "vcpu_cap", "host", "host_boot"):
                if getattr(i, key):
                    raise HarnessError(f"instance {i.name}: {key} is a guest's setting; bench runs on bare metal",
                                       "boot guests with: vmharness run CONFIG")
    return cfg


def _file(where: str, path: str, folder: bool = False) -> None:
    try:
        found = Path(path).is_dir() if folder else Path(path).is_file()
    except (OSError, ValueError):  # a name too long for the system, say
        found = False
    if path and not found:
        raise HarnessError(f"{where}: no such {'folder' if folder else 'file'} {path[:200]}", "fix the path in the "
                           "configuration (relative paths are from the directory vmharness runs in)")


def _validate_run(cfg: RunConfig) -> None:
    g, server = cfg.guest, ServerSection()
    for key in ("host", "url", "listen"):
        if getattr(cfg.server, key) != getattr(server, key):
            raise HarnessError(f"server.{key} is chosen by run: nginx runs in the guest, at the guest's address",
                               "drop it; set guest.port, and guest.address with a passed-through NIC")
    wire(g.address, g.client_address, ("guest.address", "guest.client_address"))
    checks = [
        (not (len(cfg.instance) > 1 and cfg.sweep.interleave == "point"),
         "sweep.interleave = point cannot be: a guest boots one instance at a time (use iteration)"),
        (not cfg.explain.syscalls or cfg.explain.duration >= 2,
         f"explain.duration {cfg.explain.duration:g} is too short to count system calls: each counted load is set "
         "against one of 1 s before it, so at least 2"),
    ]
    for ok, message in checks:
        if not ok:
            raise HarnessError(message, "fix the configuration file (docs/run.md lists every setting)")
    _file("guest.image", g.image, folder=True)
    check_host_boots(cfg.host_boot, tuple((i.name, i.host_boot) for i in cfg.instance))
    for i in cfg.instance:
        _file(f"instance {i.name}: kernel", i.kernel)
        _file(f"instance {i.name}: initrd", i.initrd)
        _file(f"instance {i.name}: config", i.config)
        _file(f"instance {i.name}: image", i.image, folder=True)
        if i.initrd and not i.kernel:
            raise HarnessError(f"instance {i.name}: initrd needs kernel", "name the kernel the initrd was made for")
        if i.profile:
            profile.load(i.profile)

