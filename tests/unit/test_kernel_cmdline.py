"""A guest's kernel command line read as the kernel reads it (model/kernel_cmdline.py), with known
answers from lib/cmdline.c's next_arg: double quotes group words, a value's quotes are stripped, '-' and
'_' are one in a name, a bare `--` hands the rest to init. A study's reference and its variants
(model/switches.py) follow it, and a reference whose mitigation words the kernel could read two ways,
or that already turns off what the study switches, is refused naming study.switches."""

from __future__ import annotations

import pytest

from vmharness.errors import HarnessError
from vmharness.model import config, kernel_cmdline, switches

# the line -> (key, value) of each kernel parameter, and init's part
KNOWN = [
    ("pti=on quiet", [("pti", "on"), ("quiet", None)], ""),
    ('foo="bar mitigations=off"', [("foo", "bar mitigations=off")], ""),
    ('"mitigations=off"', [("mitigations", "off")], ""),
    ('mitigations="off"', [("mitigations", "off")], ""),
    ('mitigations=o"f"f', [("mitigations", 'o"f"f')], ""),
    ('a="b c" d', [("a", "b c"), ("d", None)], ""),
    ('"nopti"', [("nopti", None)], ""),
    ("spectre-v2=off", [("spectre_v2", "off")], ""),
    ("  pti=on\t quiet  ", [("pti", "on"), ("quiet", None)], ""),
    ("pti=on -- mitigations=off single", [("pti", "on")], "-- mitigations=off single"),
    ('x="a -- b" nopti', [("x", "a -- b"), ("nopti", None)], ""),
    ("=x a=b=c", [("=x", None), ("a", "b=c")], ""),
    ('"unclosed mitigations=off', [("unclosed mitigations", "off")], ""),
    ("", [], ""),
]


@pytest.mark.parametrize(("line", "params", "rest"), KNOWN, ids=[k[0] or "empty" for k in KNOWN])
def test_a_cmdline_reads_as_the_kernels_next_arg_reads_it(line: str, params: list[tuple[str, str | None]],
                                                          rest: str) -> None:
    got = kernel_cmdline.parse(line)
    assert [(p.key, p.value) for p in got.params] == params
    assert got.rest == rest


def test_a_quoted_word_stays_whole_in_a_variant_and_off_words_go_before_init_s_part() -> None:
    assert switches.cmdline('foo="a pti=on" pti=on quiet', ["pti"]) == 'foo="a pti=on" quiet pti=off'
    assert switches.cmdline('"pti=on" quiet', ["pti"]) == "quiet pti=off"
    assert switches.cmdline("spectre-v2=retpoline quiet", ["spectre_v2"]) == "quiet spectre_v2=off"
    assert switches.cmdline("pti=on -- single", ["pti"]) == "pti=off -- single"


def _study(cmdline: str, names: list[str]) -> object:
    return config.run_from_json({"instance": [{"name": "on", "cmdline": cmdline}], "study": {"switches": names}})


@pytest.mark.parametrize(("cmdline", "names", "said"), [
    ('"mitigations=off"', ["pti"], "turns every mitigation off"),
    ('mitigations="off"', ["pti"], "turns every mitigation off"),
    ("quiet mitigations=off,nosmt", ["pti"], "turns every mitigation off"),
    ("nopti", ["pti"], "already turns pti off (nopti"),
    ('"pti=off"', ["pti"], "already turns pti off"),
    ("pti=on nospectre_v2", ["spectre_v2"], "already turns spectre_v2 off"),
    ("nospectre_v1", ["spectre_v1", "pti"], "already turns spectre_v1 off"),
    ('foo="a nopti b"', ["spectre_v2"], "'nopti' is read two ways"),  # x86's early scanner sees nopti
    ("spectre-v2=off", ["pti"], "'spectre-v2=off' is read two ways"),
    ("quiet -- nopti", ["pti"], "is read two ways"),
    ('"nopti"', ["pti"], "already turns pti off"),
    ('quiet foo="a', ["pti"], "leaves a double quote open"),  # pti=off appended would be foo's
])
def test_a_reference_that_turns_off_what_the_study_switches_is_refused(cmdline: str, names: list[str],
                                                                       said: str) -> None:
    with pytest.raises(HarnessError) as err:
        _study(cmdline, names)
    assert err.value.message.startswith("study.switches: the reference on") and said in err.value.message, \
        err.value.message


@pytest.mark.parametrize("cmdline", [
    'foo="bar mitigations=off"',  # one parameter, foo: mitigations stay on
    "pti=off pti=on",  # the last word is the one the kernel keeps
    "quiet -- mitigations=off",  # init's argument, not the kernel's
    "mitigations=auto,nosmt pti=on",
])
def test_a_reference_whose_mitigations_stay_on_is_studied(cmdline: str) -> None:
    cfg = _study(cmdline, ["pti"])
    assert [i.name for i in cfg.instance] == ["on", "no-pti"]  # type: ignore[attr-defined]
