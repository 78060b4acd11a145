"""host-check: can this host pass a NIC through to a KVM guest? One row per fact, each with its fix:
facts.py reads what several rows need once, virt.py, passthrough.py and memory.py hold the rows,
rows.py their order."""
