"""The kinds of journal record (each record's `op`), named once. A record is written and compared
by these names; on disk each is its plain string (a StrEnum serialises as its value), so a journal is
the same line for line as one written with bare strings, and one holding a kind this list does not
name (a newer harness wrote it) still reads: `journal.unknown` reports it.

Each kind is registered by the module that makes its change and undoes it (journal/journal.py for the
markers, journal/files.py, host/prepare/bind.py, pages.py, kmod.py, irqs.py and knobs.py, tune/apply.py,
guest/vm.py, bench/server.py, reload.py); a new op is a name here and a `journal.register` there."""

from __future__ import annotations

from enum import StrEnum


class OpKind(StrEnum):
    # markers: nothing to undo
    BEGIN = "begin"  # the start of a host-prepare
    RELEASED = "released"  # records given back
    OWNER = "owner"  # records handed over to another owner
    # the host, prepared for a guest
    BIND = "bind"  # a PCI device moved to another driver
    PAGES = "pages"  # a NUMA node's hugepage pool resized
    MOUNT = "mount"  # a hugetlbfs mounted
    MODULES = "modules"  # kernel modules loaded
    IRQ = "irq"  # a host interrupt's affinity set
    HOSTKNOB = "hostknob"  # a KVM module parameter or SMT control set for an instance (host/prepare/knobs.py)
    KEXEC = "kexec"  # a kernel loaded for the next host boot (experiment/hostboots/kexec.py)
    BOOT_UNIT = "boot unit"  # the systemd unit that resumes a run after a host boot (experiment/hostboots/bootunit.py)
    RELOAD = "reload"  # KVM's modules reloaded with load-time parameters for an instance (host/prepare/reload.py)
    # files, tuning, guests and servers
    FILE = "file"  # a file the harness made, here or over ssh
    TUNE = "tune"  # a tuning knob set
    DOMAIN = "domain"  # a libvirt guest defined
    SERVER = "server"  # an nginx started in its own folder
    PROCESS = "process"  # an nginx recorded by PID (journals written before `server` records)
