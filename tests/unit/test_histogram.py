"""Latency histograms: merged by summing counts, percentiles as numpy computes them on the raw
latencies, the stored runs read back or refused, older records without a histogram still read, and
report.lua's own encoding run in wrk's LuaJIT against a stand-in for wrk's latency object."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmharness.analysis import publish, report, saturation
from vmharness.bench import wrk
from vmharness.rundir import histogram
from vmharness.rundir.histogram import PERCENTILES, Histogram
from vmharness.rundir.store import RunDir

latencies = st.lists(st.floats(min_value=0, max_value=50_000, allow_nan=False), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(latencies, latencies)
def test_merging_two_clients_equals_the_histogram_of_all_their_requests(a: list[float], b: list[float]) -> None:
    merged = histogram.merge([Histogram.of(a), Histogram.of(b)])
    union = Histogram.of(a + b)
    assert merged.values.tolist() == union.values.tolist() and merged.counts.tolist() == union.counts.tolist()
    assert all(merged.percentile(q) == union.percentile(q) for q in PERCENTILES)


@settings(max_examples=200, deadline=None)
@given(latencies, st.sampled_from([*PERCENTILES, "0", "12.5", "100"]))
def test_a_percentile_is_numpys_on_the_raw_latencies_within_their_microsecond(raw: list[float], q: str) -> None:
    expected = float(np.percentile(raw, float(q), method="inverted_cdf"))
    assert Histogram.of(raw).percentile(q) == math.floor(expected)


def test_percentiles_of_a_long_tailed_sample_match_numpy() -> None:
    raw = np.random.default_rng(6).lognormal(6, 1.2, 123_457)
    h = Histogram.of(raw)
    assert h.count == len(raw)
    for q in PERCENTILES:
        assert h.percentile(q) == math.floor(np.percentile(raw, float(q), method="inverted_cdf"))
    s = h.summary()
    whole = np.floor(raw)
    assert s["mean"] == pytest.approx(whole.mean(), abs=1e-3) and s["stdev"] == pytest.approx(whole.std(ddof=1))
    assert (s["min"], s["max"]) == (int(whole.min()), int(whole.max()))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 3000), st.integers(1, 10**12), max_size=200))
def test_stored_runs_read_back_as_written(counts: dict[int, int]) -> None:
    h = Histogram(np.array(sorted(counts), dtype=np.int64), np.array([counts[v] for v in sorted(counts)],
                                                                     dtype=np.int64))
    back = Histogram.decode(json.loads(json.dumps(h.encode())))
    assert back.values.tolist() == h.values.tolist() and back.counts.tolist() == h.counts.tolist()


def test_short_gaps_stay_in_a_run_and_long_ones_start_another() -> None:
    h = Histogram(np.array([10, 11, 14, 20], dtype=np.int64), np.array([5, 6, 7, 8], dtype=np.int64))
    assert h.encode() == [[10, 5, 6, 0, 0, 7], [20, 8]]


@pytest.mark.parametrize(("runs", "fault"), [
    ({"10": 5}, "a list of runs"),
    ([[10]], "run 0 is not"),
    ([[10, "5"]], "run 0 is not"),
    ([[10, True]], "run 0 is not"),
    ([[10, 1.5]], "run 0 is not"),
    ([[-1, 5]], "run 0 starts at -1"),
    ([[20, 1], [10, 1]], "run 1 starts at 10"),
    ([[10, 1, 1], [11, 1]], "run 1 starts at 11"),
    ([[10**11, 1]], "within"),
    ([[10, -3]], "run 0 has a count below 0"),
    ([[10, 2**60]], "run 0 has a count"),
])
def test_a_damaged_histogram_is_refused_with_its_fault(runs: object, fault: str) -> None:
    with pytest.raises(ValueError, match=fault):
        Histogram.decode(runs)


def test_a_percentile_needs_ten_requests_beyond_it() -> None:
    assert histogram.supported("99.9", 10_000) and not histogram.supported("99.9", 9_999)
    assert not histogram.supported("99.99", 30_000) and histogram.supported("99.99", 100_000)
    assert not histogram.supported("50", 0)


def test_an_older_record_without_a_histogram_keeps_its_percentiles() -> None:
    old = histogram.from_record({"percentiles": {"50": 90, "90": 120, "99": 300, "99.9": 800}}, 5000)
    assert old.histogram is None and old.count == 5000 and old.percentiles["99"] == 300.0
    assert math.isnan(old.percentiles["99.99"])
    new = histogram.from_record({"percentiles": {"50": 1}, "count": 3, "histogram": [[7, 1, 2]]}, 3)
    assert new.histogram is not None and new.percentiles["50"] == 8.0  # from the histogram, not the stored 1
    with pytest.raises(TypeError):
        histogram.from_record([1, 2], 3)  # type: ignore[arg-type]


def _run_with(tmp_path: Path, per_iteration: dict[str, list[list[list[int]] | None]], requests: int) -> RunDir:
    run = RunDir.create(tmp_path / "run", {"config": {"instance": [{"name": n} for n in per_iteration]}})
    for name, hists in per_iteration.items():
        for it, runs in enumerate(hists):
            lat: dict[str, object] = {"percentiles": {"50": 100, "90": 150, "99": 300, "99.9": 900}}
            if runs is not None:
                lat = {**Histogram.decode(runs).summary(), "histogram": runs}
            run.append({"kind": "measurement", "key": f"{name}/8/{it}", "ok": True, "instance": name,
                        "connections": 8, "iteration": it, "samples": {},
                        "client": {"requests_per_s": 1000.0 + it, "requests": requests, "errors": {"total": 0},
                                   "latency_us": lat}})
    return run


def test_the_report_marks_percentiles_the_sample_cannot_support(tmp_path: Path) -> None:
    few = [[100, 5000], [400, 40], [2000, 3]]  # 5,043 requests: p99.9 and p99.99 have under 10 beyond them
    run = _run_with(tmp_path, {"base": [few, few], "other": [few, None]}, 5043)
    a = saturation.analyse(run)
    rows = {r["instance"]: r for r in report.to_json(a)["rows"]}
    assert rows["base"]["thin_percentiles"] == "p99.9 p99.99"
    assert rows["base"]["p99.99_us"] == 2000 and rows["other"]["p99.99_us"] == 2000  # the old record has none
    out = report.text(a)
    assert "2,000*" in out and out.splitlines()[-1] == report.THIN_FOOT
    assert "P99.99 US" in out and "400*" in out  # p99.9
    assert report.latency_cell(rows["base"], "99") == "100"  # p99 of 5,043 has 50 requests beyond it
    assert "  p99.99 " in out and report.THIN_NOTE in out


def test_the_page_shows_each_instances_latency_distribution_at_the_peak(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    runs: dict[str, list[list[list[int]] | None]] = {
        n: [Histogram.of(rng.lognormal(5 + (n == "other") * 0.2, 0.5, 20_000)).encode() for _ in range(2)]
        for n in ("base", "other")}
    run = _run_with(tmp_path, runs, 20_000)
    written = publish.publish(saturation.analyse(run), tmp_path / "out", title="t")
    assert {"latency-ccdf.png", "latency-ccdf.svg"} <= {p.name for p in written}
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count("<svg") == 4 and "share of requests slower" in page
    # 20,000 requests leave only p99.99 thin: its cells marked as the text table marks them, and footnoted
    points = page.split("<summary>Every point</summary>")[1].split("</table>")[0]
    cells = [row.split("</td><td>") for row in points.split("<tr>")[2:]]
    assert report.THIN_FOOT in page and cells and all(c[9].endswith("*") and not c[8].endswith("*") for c in cells)


def _luajit() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("luajit-5.1") or "libluajit-5.1.so.2"
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


# A stand-in for wrk's latency object, a userdata as wrk's is (a table's __len is not called in Lua
# 5.1): latency(i) gives the i-th non-empty microsecond and its count, #latency their number, and the
# fields and latency:percentile(q) that done() reads. Without CALLABLE it cannot be called, as wrk2's.
STUB = """
local v, c = {VALUES}, {COUNTS}
local fields = {min = v[1] or 0, mean = 1.5, stdev = 0.5, max = v[#v] or 0,
                percentile = function(self, q) return v[1] or 0 end}
local latency = newproxy(true)
local mt = getmetatable(latency)
mt.__index = function(_, k) return fields[k] end
mt.__len = function() return #v end
if CALLABLE then mt.__call = function(_, i) return v[i], c[i] end end
OUT = ""
io.write = function(s) OUT = OUT .. s end
done({duration = 1000000, requests = 10, bytes = 100,
      errors = {connect = 0, read = 0, write = 0, status = 0, timeout = 0}}, latency, latency)
"""


def _lua_report(values: list[int], counts: list[int], callable_: bool = True) -> str:
    lib = _luajit()
    if lib is None:
        pytest.skip("wrk's LuaJIT library is not installed")
    lib.luaL_newstate.restype = ctypes.c_void_p
    lib.lua_tolstring.restype = ctypes.c_char_p
    lib.lua_tolstring.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    for f in ("luaL_openlibs", "lua_close"):
        getattr(lib, f).argtypes = [ctypes.c_void_p]
    lib.luaL_loadstring.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.lua_pcall.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.lua_getfield.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]
    state = lib.luaL_newstate()
    try:
        lib.luaL_openlibs(state)
        stub = (STUB.replace("{VALUES}", "{" + ",".join(map(str, values)) + "}")
                .replace("{COUNTS}", "{" + ",".join(map(str, counts)) + "}"))
        code = f"CALLABLE = {str(callable_).lower()}\n" + wrk.REPORT_LUA.read_text() + stub
        assert lib.luaL_loadstring(state, code.encode()) == 0, lib.lua_tolstring(state, -1, None)
        assert lib.lua_pcall(state, 0, 0, 0) == 0, lib.lua_tolstring(state, -1, None)
        lib.lua_getfield(state, -10002, b"OUT")  # LUA_GLOBALSINDEX
        return str(lib.lua_tolstring(state, -1, None).decode())
    finally:
        lib.lua_close(state)


def test_report_lua_writes_the_histogram_as_python_reads_it() -> None:
    values = [20, 21, 23, 27, 31, 32, 900, 50_000]
    counts = [5, 7, 1, 2, 3, 1, 1, 4]
    got = wrk.parse(_lua_report(values, counts))
    h = Histogram.decode(got["latency_us"]["histogram"])
    assert h.values.tolist() == values and h.counts.tolist() == counts
    assert got["latency_us"]["histogram"] == Histogram(h.values, h.counts).encode()


def test_report_lua_says_why_a_wrk_without_a_histogram_gave_none() -> None:
    got = wrk.parse(_lua_report([20], [1], callable_=False))
    assert got["latency_us"]["histogram"] is None and "wrk2" in got["latency_us"]["no_histogram"]
