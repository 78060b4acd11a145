"""Is KVM usable? /dev/kvm existing is not enough: run the probe guest in a child with a timeout."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from vmharness import proc
from vmharness.errors import HarnessError

PROBE_TIMEOUT = 5.0


@dataclass(frozen=True)
class KvmProbe:
    usable: bool
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"usable": self.usable, "detail": self.detail}


def probe(dev: str = "/dev/kvm", timeout: float = PROBE_TIMEOUT) -> KvmProbe:
    try:
        res = proc.run(
            [sys.executable, "-m", "vmharness.host.kvm_probe", dev], timeout=timeout, check=False
        )
    except HarnessError:
        return KvmProbe(
            False,
            f"the probe guest did not finish within {timeout:g} s: /dev/kvm exists but guests hang",
        )
    try:
        data = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return KvmProbe(False, f"the probe crashed (exit {res.returncode}): {res.stderr.strip()[-200:]}")
    if res.ok:
        return KvmProbe(True, f"a guest entered long mode and ran (KVM API {data.get('api_version')})")
    return KvmProbe(False, str(data.get("error", "unknown failure")))
