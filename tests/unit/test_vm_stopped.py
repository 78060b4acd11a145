"""What `vm up` says of a guest that stopped while booting: libvirt's reason, read from the domain
(a fake: the real one, a QEMU killed mid-boot, is tests/integration/test_guest.py's)."""

from __future__ import annotations

import libvirt
import pytest

from vmharness.guest import vm


class _Dom:
    def __init__(self, state: tuple[int, int] | None) -> None:
        self._state = state

    def state(self) -> tuple[int, int]:
        if self._state is None:
            raise libvirt.libvirtError("Domain not found: no domain with matching uuid")
        return self._state


@pytest.mark.parametrize(("reason", "said"), [
    (libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN, "by the guest's power-off or reset"),
    (libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED, "destroyed, on the guest's reset or from outside"),
    (libvirt.VIR_DOMAIN_SHUTOFF_CRASHED, "its QEMU ended unexpectedly"),
    (libvirt.VIR_DOMAIN_SHUTOFF_FAILED, "failed to start"),
    (99, "shut off, reason 99"),
])
def test_libvirts_reason_for_a_stopped_guest_is_said(reason: int, said: str) -> None:
    assert said in vm._why_stopped(_Dom((libvirt.VIR_DOMAIN_SHUTOFF, reason)))


def test_a_domain_libvirt_no_longer_knows_is_said_as_such() -> None:
    assert vm._why_stopped(_Dom(None)).startswith("libvirt did not say why: ")
    assert vm._why_stopped(_Dom((libvirt.VIR_DOMAIN_RUNNING, 1))) == "libvirt: state 1, reason 1"
