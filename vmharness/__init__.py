"""vmharness: measure what kernel and hypervisor mitigations cost a webserver."""

__version__ = "0.1.0"
