"""The page to read (analysis/page.py), on recorded runs: the demo's (tests/unit/golden/runs) and a run
with profiles (test_flame.py's, its flame graphs drawn by the real inferno).

Held two ways. Its structure, in Python: the answer's table and the forest plot first, every other part
in a <details> section, no script, nothing it would fetch (every src and href a data: URI or a fragment).
And as a reader sees it: the real headless Chromium (`make deps` installs it; without it this test fails,
never skips) opens a copy of the page at 1280×800 with a measuring script appended by this test alone,
offline (every host name resolves to nothing) and in a throw-away profile: the table's cells and the
forest plot lie within the first screen, nothing is wider than the page with every section opened, and
every image loads."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.unit.test_flame import INFERNO
from tests.unit.test_flame import _run as profiled_run
from vmharness.analysis import flame, publish, saturation
from vmharness.rundir.store import RunDir

RUNS = Path(__file__).parent / "golden" / "runs"
WIDTH, HEIGHT = 1280, 800
SECTIONS = ["The saturation curve", "Latency: percentiles, distribution, against load",
            "Why each cost: counters, system calls, profiles", "Noise, planning and method", "The positive control",
            "The host and guests measured", "Every point"]

# appended to a copy of the page by this test, never to the page: what the reader's first screen holds (the
# top 800 px of the page: headless Chromium's window of 1280×800 shows less of it in --dump-dom, its
# screenshot all of it), then every section opened, what overflows and whether each image loaded
MEASURE = """<script>
addEventListener("load", () => {
  const inside = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.bottom <= SCREEN_HEIGHT
                        && r.right <= innerWidth; };
  const cells = [...document.querySelectorAll(".answer td, .answer th")];
  const forest = document.querySelector(".forest svg");
  const first = {cells: cells.length, outside: cells.filter(c => !inside(c)).map(c => c.textContent),
                 forest: forest !== null && inside(forest), width: innerWidth};
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const root = document.documentElement;
  const out = {first, scrollWidth: root.scrollWidth, clientWidth: root.clientWidth,
               images: [...document.images].map(i => [i.complete, i.naturalWidth]),
               fetched: performance.getEntriesByType("resource").map(e => e.name).filter(n => !n.startsWith("data:"))};
  const pre = document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  document.body.append(pre);
});
</script>""".replace("SCREEN_HEIGHT", str(HEIGHT))


def _demo_page(tmp_path: Path) -> Path:
    with tarfile.open(RUNS / "run.tar.xz") as t:
        t.extractall(tmp_path / "run", filter="data")
    publish.publish(saturation.analyse(RunDir.open(tmp_path / "run")), tmp_path / "out", "vmharness run: demo")
    return tmp_path / "out" / "report.html"


def _profiled_page(tmp_path: Path) -> Path:
    assert flame.found() is not None, INFERNO
    publish.publish(saturation.analyse(profiled_run(tmp_path)), tmp_path / "out", "profiled")
    return tmp_path / "out" / "report.html"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def self_contained(html: str) -> list[tuple[str, dict[str, str | None]]]:
    """The page's tags, once it is held to run nothing and fetch nothing: no script, no event handler,
    every src and href (SVG's xlink:href too) a data: URI or a fragment, no url() in a style."""
    parser = _Tags()
    parser.feed(html)
    assert "<script" not in html.lower()
    for tag, attrs in parser.tags:
        assert tag not in ("script", "iframe", "object", "embed", "link", "base"), tag
        for key, value in attrs.items():
            assert not key.startswith("on"), (tag, key)
            if key in ("src", "href", "xlink:href", "srcset", "action", "poster", "data"):
                assert str(value).startswith(("data:image/", "#")), (tag, key, str(value)[:80])
    assert not re.search(r"url\(\s*['\"]?(?!#|data:)", html), "a style fetches"
    return parser.tags


def test_the_page_begins_with_the_answer_and_opens_the_rest_when_asked(tmp_path: Path) -> None:
    html = _demo_page(tmp_path).read_text()
    self_contained(html)
    head, rest = html.split("<details>", 1)
    # the first screen: the warnings that void the answer, its table, the forest plot of its changes
    assert head.index('<div class="warn">the positive control was not detected') < head.index('<div class="answer">')
    assert head.index("<td>control</td><td>-39.1% [-95.1%, +655.7%]</td>") < head.index('<figure class="forest"><svg')
    forest = head.split('<figure class="forest">', 1)[1]
    assert "change against baseline" in forest and "throughput" in forest and "p99 latency" in forest
    assert ">pti<" not in head.split('<div class="answer">')[0]
    summaries = re.findall(r"<details><summary>(.*?)</summary>", html)
    # the two of the open-loop points stand in its section, the three of the curve's shape in the curve's
    assert summaries == ["1 more warning", *SECTIONS]
    curve = rest.split("<summary>The saturation curve</summary>", 1)[1].split("</details>", 1)[0]
    assert curve.count('<div class="warn">') == 3 and "the peak is not distinct" in curve
    assert "<details>" not in head and "<figure><svg" not in head  # every other figure in a section
    assert rest.count("<svg") == 4  # throughput, latency, its CCDF, latency against load: inline
    assert "noise in baseline: " in rest and "NOT detected" in rest and "CPU flag + pti" in rest
    assert "client this machine: wrk against nginx on itself 66,468 req/s, oha 68,588 req/s" in rest
    assert html.count('<div class="box"><table>') == html.count("<table>")  # every table in its scrolling box


def test_each_flame_graph_is_inline_as_an_image_that_runs_no_script(tmp_path: Path) -> None:
    html = _profiled_page(tmp_path).read_text()
    tags = self_contained(html)
    images = [str(a["src"]) for t, a in tags if t == "img"]
    drawn = (tmp_path / "out" / "flame-pti.svg").read_bytes()
    assert b"<script" in drawn  # inferno's search and zoom: it never runs in an <img>
    assert len(images) == 2 and all(src.startswith("data:image/svg+xml;base64,") for src in images)
    import base64

    assert drawn in [base64.b64decode(src.split(",", 1)[1]) for src in images]
    why = html.split("<summary>Why each cost: counters, system calls, profiles</summary>")[1].split("</details>")[0]
    assert "<h3>What grew per request in the profiles</h3>" in why and "flame-pti.svg beside this page" in why


def test_a_report_without_figures_writes_every_text_form_and_draws_nothing(tmp_path: Path) -> None:
    # `[report] figures = false`: the same records, every form but the drawings; the negative control
    # draws them (the figures and, this run having profiles, its flame graphs)
    assert flame.found() is not None, INFERNO
    a = saturation.analyse(profiled_run(tmp_path))
    bare = publish.publish(a, tmp_path / "bare", "profiled", figures=False)
    drawn = publish.publish(a, tmp_path / "drawn", "profiled")
    figures = (".svg", ".png", ".pdf")
    assert [p.name for p in bare] == [p.name for p in drawn if p.suffix not in figures]
    made = sorted(p.name for p in (tmp_path / "bare").iterdir() if p.name != ".vmharness")  # the folder's marker
    assert made == sorted(p.name for p in bare)
    assert {"flame-pti.svg", "forest.png", "forest.pdf"} < {p.name for p in drawn}
    for name in ("report.txt", "report.json", "report.csv", "report.md"):
        assert (tmp_path / "bare" / name).read_bytes() == (tmp_path / "drawn" / name).read_bytes(), name
    page = (tmp_path / "bare" / "report.html").read_text()
    assert "<svg" not in page and "<img" not in page and "<svg" in (tmp_path / "drawn" / "report.html").read_text()
    # written again without figures where they were drawn: the earlier drawings go, but for its flame graphs
    # (named for its variants: publish.py)
    publish.publish(a, tmp_path / "drawn", "profiled", figures=False)
    left = {p.name for p in (tmp_path / "drawn").iterdir() if p.name != ".vmharness"}
    assert left == {p.name for p in bare} | {p.name for p in drawn if p.name.startswith("flame-")}


def _chromium(page: Path, tmp_path: Path) -> dict[str, object]:
    """The page opened by headless Chromium at 1280×800, offline, in a profile of its own: the measures
    its copy's appended script wrote into the DOM. Chromium is stopped by its id at the end."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: run `make deps`"
    copy = page.with_name("measured.html")
    copy.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    argv = [chromium, "--headless", "--disable-gpu", f"--user-data-dir={tmp_path / 'chromium-profile'}",
            f"--window-size={WIDTH},{HEIGHT}", "--host-resolver-rules=MAP * ~NOTFOUND",
            "--disable-background-networking", "--no-first-run", "--virtual-time-budget=10000",
            *(["--no-sandbox"] if os.geteuid() == 0 else []),  # its sandbox refuses to run as root
            "--dump-dom", copy.as_uri()]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True)
    try:
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)  # its own session: the browser and the children it started
            p.wait()
    found = re.search(r'<pre id="measured">(.*?)</pre>', out, re.S)
    assert found, err[-2000:]
    got: dict[str, object] = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    return got


@pytest.mark.parametrize("which", ["demo", "profiled"])
def test_chromium_shows_the_answer_in_the_first_screen_and_nothing_wider(which: str, tmp_path: Path) -> None:
    page = _demo_page(tmp_path) if which == "demo" else _profiled_page(tmp_path)
    got = _chromium(page, tmp_path)
    first = got["first"]
    assert isinstance(first, dict) and first["width"] == WIDTH, first
    assert first["cells"] >= 8 and first["outside"] == [] and first["forest"], first
    assert got["scrollWidth"] == got["clientWidth"] and isinstance(got["clientWidth"], int), got
    assert got["clientWidth"] <= WIDTH
    images = got["images"]
    assert isinstance(images, list) and len(images) == (0 if which == "demo" else 2)
    assert all(done and width > 0 for done, width in images), images
    assert got["fetched"] == [], got["fetched"]
