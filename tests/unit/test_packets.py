"""Packets per request on the server, against what its response needs: on sampler output of known
content."""

from __future__ import annotations

from vmharness.analysis import packets


def _samples(net: dict[str, dict[str, float]]) -> dict[str, object]:
    return {"srv": {"net": net}}


def test_one_segment_per_small_response_is_what_it_needs() -> None:
    sent = packets.per_request(_samples({"eth0": {"tx_packets_per_s": 1000.0}, "lo": {"tx_packets_per_s": 5.0}}),
                               "srv", 1000.0)
    assert sent == (1.0, False)
    assert packets.flag("base", 8, [sent], {"filesize": 64, "mode": "file"}) is None


def test_a_response_split_in_two_is_flagged_with_its_figure() -> None:
    split = (2.05, False)
    said = packets.flag("base", 8, [split, split], {"filesize": 64})
    assert said is not None and "2.05 packets per request (sent) where 1 would do" in said


def test_loopback_counts_both_directions_and_a_large_file_needs_more_segments() -> None:
    lo = packets.per_request(_samples({"lo": {"tx_packets_per_s": 4000.0}}), "srv", 1000.0)
    assert lo == (4.0, True)
    assert packets.needed({"filesize": 64}, True) == 2
    assert "4.00 packets per request (on loopback, both directions) where 2" in str(packets.flag("b", 2, [lo], {}))
    assert packets.needed({"filesize": 1 << 20}, False) == 725  # a MiB in 1448-byte segments
    assert packets.needed({"mode": "return"}, False) == 1
    assert packets.flag("b", 2, [(700.0, False)], {"filesize": 1 << 20}) is None


def test_no_samples_no_figure() -> None:
    assert packets.per_request({}, "srv", 1000.0) is None
    assert packets.per_request(_samples({"eth0": {"tx_packets_per_s": 10.0}}), "srv", 0.0) is None
    assert packets.flag("b", 2, [], {}) is None
