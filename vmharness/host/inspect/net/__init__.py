"""The host's network as host-prepare's SSH guard reads it: routes and addresses (routes.py), how
devices are stacked (stack.py), which route carries the SSH session (ssh_route.py), all gathered into
one record (held.py, survey.py), and the verdict on one interface (verdict.py)."""
