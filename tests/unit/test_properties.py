"""Property tests: whatever a user or a damaged file gives the readers of names, PCI addresses, CPU
lists and masks, memory sizes, NUMA nodes, connection lists, numbers, libvirt URIs, wire addresses and
whole configurations, the answer is a value or a HarnessError (one line), never another exception; and
what is accepted keeps its promise (a CPU list names each CPU once, a number is ASCII digits, a URI is
on the allow-list, an address is a unicast host of a network with room for two)."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmharness import cpus, digits
from vmharness.cli import types as cli_types
from vmharness.errors import HarnessError
from vmharness.host.prepare import plan
from vmharness.model import checks, config, connections, libvirt_uri, profile, rules, schema, sections, wire
from vmharness.model.bdf import parse_bdf

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
WHOLE = settings(FAST, max_examples=80)  # a whole configuration per example: fewer, to keep the suite fast


def _value_or_error(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except HarnessError as exc:
        assert "\n" not in exc.message and "\n" not in exc.hint, exc.render()
        assert exc.message and exc.hint
        return None


# text built from the characters these parsers care about, plus anything at all
def _texts(alphabet: str) -> st.SearchStrategy[str]:
    return st.text(alphabet, max_size=30) | st.text(max_size=30)


@FAST
@given(_texts("abAB09._-/ $;\n\x00ä"))
def test_a_name_is_accepted_only_when_it_is_safe_in_a_path(text: str) -> None:
    name = _value_or_error(checks.check_name, text, "--name")
    if name is not None:
        assert name == text and 1 <= len(name) <= 63 and name[0] not in "-."
        assert re.fullmatch(r"[A-Za-z0-9._-]+", name) and name not in (".", "..")


@FAST
@given(_texts("0123456789abcdefABCDEF:.x \n"))
def test_a_pci_address_is_parsed_or_refused(text: str) -> None:
    bdf = _value_or_error(parse_bdf, text, "--bdf")
    if bdf is not None:
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]", bdf)
        assert parse_bdf(bdf) == bdf


@FAST
@given(_texts("0123456789-,\n +０²") | st.integers(0, 10**12).map(lambda n: f"0-{n}"))
def test_a_cpu_list_is_parsed_or_refused(text: str) -> None:
    found = _value_or_error(cpus.parse_cpulist, text, "cpulist")
    if found is not None:  # strict: what the kernel writes, each CPU once, at most one newline at the end
        assert all(0 <= c < cpus.MAX_CPUS for c in found) and len(set(found)) == len(found)
        body = text.removesuffix("\n")
        assert re.fullmatch(r"([0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)?", body)
        assert cpus.parse_cpulist(cpus.format_cpulist(found)) == tuple(sorted(found))


@FAST
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), min_size=1, max_size=6))
def test_a_cpu_list_naming_a_cpu_twice_is_refused_whatever_its_spelling(ranges: list[tuple[int, int]]) -> None:
    text = ",".join(f"{a}-{a + n}" if n else str(a) for a, n in ranges)
    named = [c for a, n in ranges for c in range(a, a + n + 1)]
    found = _value_or_error(cpus.parse_cpulist, text, "cpulist")
    assert (found is not None) == (len(set(named)) == len(named))
    assert found is None or list(found) == named


@FAST
@given(st.text("0123456789-+_ \n١０²", max_size=12) | st.integers().map(str) | st.text(max_size=12))
def test_numbers_are_read_in_ascii_digits_only(text: str) -> None:
    value = digits.integer(text, signed=True)
    plain = re.fullmatch(r"-?[0-9]+", text) is not None
    assert (value is not None) == (plain and len(text) <= digits.MAX_DIGITS)
    if value is not None:
        assert value == int(text) and str(value) == str(int(text))
    assert digits.is_digits(text) == bool(re.fullmatch(r"[0-9]+", text))
    whole = _value_or_error_flag(cli_types.whole(-(10**9), 10**9), text)
    assert whole is None or plain
    secs = _value_or_error_flag(cli_types.seconds(0, 10**9), text)
    assert secs is None or re.fullmatch(r"[0-9.eE+-]+", text)


def _value_or_error_flag(parse: Any, text: str) -> Any:
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        assert "\n" not in str(exc)
        return None


_URI_PARTS = {
    "driver": st.sampled_from(["qemu", "qemu", "xen", "test", "QEMU", "lxc"]),
    "transport": st.sampled_from(["", "", "+ssh", "+unix", "+tls", "+ext", "+tcp", "+libssh", "+ssh+ext"]),
    "host": st.sampled_from(["", "", "server1", "root@server1", "server1:2222", "-oProxyCommand=x", "a b",
                             "[::1]", "root@-x", "h:０", "h:99999", "@h", "h\n"]),
    "path": st.sampled_from(["/system", "/system", "/session", "/embed", "/", "/system/../x"]),
    "query": st.lists(st.sampled_from(["no_tty=1", "mode=direct", "proxy=native", "command=/bin/sh",
                                       "socket=/x", "keyfile=/k", "netcat=nc", "no_verify=1", "pkipath=/p",
                                       "comm%61nd=x", "mode=auto;command=x", "mode=", "name=qemu:///x", "x=y",
                                       "", "mode=auto"]), max_size=3),
}


@FAST
@given(st.fixed_dictionaries(_URI_PARTS) | st.text(max_size=60).map(lambda t: {"raw": t}))
def test_a_libvirt_uri_is_accepted_only_from_the_allow_list(parts: dict[str, Any]) -> None:
    uri = parts["raw"] if "raw" in parts else (f"{parts['driver']}{parts['transport']}://{parts['host']}{parts['path']}"
                               + ("?" + "&".join(parts["query"]) if parts["query"] else ""))
    accepted = _value_or_error(libvirt_uri.parse, uri, "guest.uri")
    if accepted is None:
        return
    scheme, _, rest = uri.partition("://")
    assert scheme in ("qemu", "qemu+ssh", "qemu+unix", "qemu+tls") and uri.isascii() and "%" not in uri
    params = [p.partition("=") for p in rest.partition("?")[2].split("&")] if "?" in rest else []
    assert all(name in ("no_tty", "mode", "proxy") and ";" not in value for name, _, value in params)
    assert len({name for name, _, _ in params}) == len(params)
    dest = accepted.destination
    assert dest is None or (not dest.startswith("-") and not any(c.isspace() for c in dest))
    assert (dest is None) == (scheme in ("qemu", "qemu+unix") and rest.startswith("/"))
    assert libvirt_uri.check(uri, "guest.uri") == uri


@FAST
@given(st.ip_addresses(v=4), st.integers(0, 32))
def test_a_wire_address_is_a_unicast_host_of_a_network_with_room(ip: Any, prefix: int) -> None:
    text = f"{ip}/{prefix}"
    if _value_or_error(wire.check_address, text, "--address") is None:
        return
    net = ipaddress.IPv4Interface(text).network
    assert 8 <= prefix <= 30 and ip not in (net.network_address, net.broadcast_address)
    assert not (ip.is_loopback or ip.is_multicast or ip.is_link_local or ip.is_reserved or ip in
                ipaddress.IPv4Network("0.0.0.0/8"))


@FAST
@given(st.sets(st.integers(0, cpus.MAX_CPUS - 1), max_size=40))
def test_a_cpu_list_and_a_mask_round_trip(wanted: set[int]) -> None:
    text = ",".join(map(str, sorted(wanted)))
    assert set(cpus.parse_cpulist(text)) == wanted
    assert cpus.parse_mask(cpus.format_mask(wanted, cpus.MAX_CPUS)) == wanted


@FAST
@given(_texts("0123456789abcdefABCDEF,x \n") | st.integers(2040, 2100).map(lambda n: "f" * n))
def test_a_cpu_mask_is_parsed_or_refused(text: str) -> None:
    found = _value_or_error(cpus.parse_mask, text)
    if found is not None:
        assert all(0 <= c < cpus.MAX_CPUS for c in found)


@FAST
@given(_texts("0123456789KMGTkmgtiBb.-+ e"))
def test_a_memory_size_is_parsed_or_refused(text: str) -> None:
    kib = _value_or_error(plan.parse_amount, text)
    if kib is not None:
        assert 0 < kib <= plan.MAX_AMOUNT_KIB and text[-1].isalpha()


@FAST
@given(_texts("0123456789autoe-+. "))
def test_a_numa_node_is_parsed_or_refused(text: str) -> None:
    node = _value_or_error(plan.parse_node, text)
    if node is not None:
        assert 0 <= node <= plan.MAX_NODE


@FAST
@given(_texts("0123456789:,-_ ") | st.lists(st.tuples(st.integers(-5, 10**9), st.integers(-5, 10**9),
                                                      st.integers(-5, 10**9)), max_size=4)
       .map(lambda rs: ",".join(f"{a}:{b}:{c}" for a, b, c in rs)))
def test_a_connection_list_is_parsed_or_refused_before_it_is_expanded(text: str) -> None:
    counts = _value_or_error(connections.parse, text)
    if counts is not None:
        assert 0 < len(counts) <= connections.MAX_POINTS and list(counts) == sorted(set(counts))
        assert all(1 <= c <= connections.MAX_CONNECTIONS for c in counts)


# --- whole configurations ------------------------------------------------------------------------

def _field_names(cls: type) -> set[str]:
    names = set()
    for f in dataclasses.fields(cls):
        names.add(f.name)
        kind = f.type if isinstance(f.type, type) else None
        if kind is not None and dataclasses.is_dataclass(kind):
            names |= _field_names(kind)
    return names


KEYS = sorted(_field_names(sections.RunConfig) | {n for c in (sections.ServerSection, sections.InstanceSection,
               sections.ClientSection, sections.SweepSection, sections.SamplerSection, sections.TuningSection,
               sections.GuestSection, profile.Profile) for n in _field_names(c)} | {"base"})
SCALARS = (st.booleans() | st.integers(-(2**70), 2**70) | st.integers(-3, 70000)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from(["", "auto", "2M", "seeds", "none", "a", "-x", "../x", "8:4:1", "16:256:16",
                              "198.19.0.2/24", "0000:b3:00.0", "qemu:///system", "http://127.0.0.1:8080/"])
           | st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner, max_size=4),
                      max_leaves=12)
TABLES = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), VALUES, max_size=5)


@WHOLE
@given(TABLES)
def test_any_table_gives_a_bench_configuration_or_one_error(data: dict[str, Any]) -> None:
    cfg = _value_or_error(lambda: rules.validate(schema.table("config", sections.BenchConfig, data)))
    if cfg is not None:
        assert config.from_json(cfg.to_json()) == cfg


@WHOLE
@given(TABLES)
def test_any_table_gives_a_run_configuration_or_one_error(data: dict[str, Any]) -> None:
    cfg = _value_or_error(lambda: rules.validate(schema.table("config", sections.RunConfig, data)))
    if cfg is not None:
        assert config.run_from_json(cfg.to_json()) == cfg


@WHOLE
@given(st.dictionaries(st.sampled_from(["sweep", "guest", "server", "client", "instance", "samplers", "tuning"]),
                       st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=4), max_size=4))
def test_any_section_of_known_keys_gives_a_configuration_or_one_error(data: dict[str, Any]) -> None:
    for cls in (sections.BenchConfig, sections.RunConfig):
        _value_or_error(lambda c=cls: rules.validate(schema.table("config", c, data)))


@WHOLE
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode)
       | st.sampled_from([b"[sweep]\nwait = inf\n", b"[[instance]]\nname = '../x'\n", b"\xff\xfe[", b"a = 1\n"]))
def test_any_file_gives_a_configuration_or_one_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(content)
    _value_or_error(config.load, path)
    _value_or_error(config.load_run, path)
    _value_or_error(profile.load, str(path))


@pytest.mark.parametrize("name", ["", ".", "/", "x" * 5000, "a\x00b", "/proc/self/mem"])
def test_a_profile_that_is_not_a_readable_file_is_one_error(name: str) -> None:
    with pytest.raises(HarnessError):
        profile.load(name)
