"""Powering a domain off (host/libvirt/api.py): libvirt asked again when it gave up on a QEMU that
had not exited, and one line once it gave up every time."""

from __future__ import annotations

import libvirt
import pytest

from vmharness.errors import HarnessError
from vmharness.host.libvirt import api

BUSY = "Failed to terminate process 4242 with SIGKILL: Device or resource busy"


class Domain:
    """A running domain whose QEMU outlives the first `refusals` destroys."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.active = True
        self.destroys = 0

    def isActive(self) -> bool:  # libvirt's name
        return self.active

    def name(self) -> str:
        return "vmh-busy"

    def destroy(self) -> None:
        self.destroys += 1
        if self.destroys <= self.refusals:
            raise libvirt.libvirtError(BUSY)
        self.active = False


def test_a_qemu_that_outlived_one_destroy_is_powered_off_by_the_next() -> None:
    dom = Domain(refusals=2)
    api._destroy(dom, tries=3, pause=0)
    assert not dom.active and dom.destroys == 3


def test_a_qemu_that_outlives_every_destroy_is_one_line_naming_the_domain() -> None:
    dom = Domain(refusals=5)
    with pytest.raises(HarnessError) as err:
        api._destroy(dom, tries=3, pause=0)
    assert dom.active and dom.destroys == 3
    assert str(err.value).startswith("libvirt could not power off vmh-busy (3 tries): Failed to terminate")
    assert "host-restore" in err.value.hint


def test_a_domain_that_went_by_itself_is_not_destroyed() -> None:
    dom = Domain(refusals=0)
    dom.active = False
    api._destroy(dom, tries=3, pause=0)
    assert dom.destroys == 0
