"""A nested-VM rig for integration tests: L1 under TCG, driven through its guest agent."""

from tests.rig.failures import RigError
from tests.rig.rig import GUEST_ENV, Nic, Rig

__all__ = ["GUEST_ENV", "Nic", "Rig", "RigError"]
