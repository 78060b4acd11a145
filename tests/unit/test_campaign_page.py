"""`campaign report DIR --out REPORT` (campaign/published.py): every form in a folder of the report's
own, the HTML page led by the forest plot of every done run's change, the campaign folder's texts
escaped in it; a folder that is not the report's, or a link, refused before anything is written."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.unit.conftest import Cli
from tests.unit.test_campaign import recorded

MARKUP = "error: <script>alert(1)</script> & <b>x</b>"


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def campaign(tmp_path: Path) -> tuple[Path, list[str]]:
    """Three cells: two done (the recorded bench run), one failed with markup in why."""
    return tmp_path / "camp", recorded(tmp_path, 3, MARKUP)[1]


def test_every_form_and_a_page_led_by_the_forest_plot(tmp_path: Path, cli: Cli) -> None:
    camp, names = campaign(tmp_path)
    code, out, err = cli("campaign", "report", str(camp), "--out", str(tmp_path / "rep"))
    assert code == 0, err
    written = sorted(p.name for p in (tmp_path / "rep").iterdir() if not p.name.startswith("."))
    assert written == sorted(["campaign-report.csv", "campaign-report.html", "campaign-report.json",
                              "campaign-report.md", "campaign-report.txt", "forest.pdf", "forest.png", "forest.svg"])
    assert (tmp_path / "rep" / "campaign-report.txt").read_text() == out  # the text form as printed
    assert "campaign-report.html" in err
    page = (tmp_path / "rep" / "campaign-report.html").read_text()
    tags = Tags()
    tags.feed(page)
    assert "script" not in tags.tags and "b" not in tags.tags  # the failed cell's why is text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;x&lt;/b&gt;" in page
    # the figure first, inline, naming the done runs that have a change (the baseline has none)
    assert page.index("<svg") < page.index("<table")
    assert f"{names[1]}/base" in page[page.index("<svg"):page.index("</svg>")]
    assert re.search(rf"<td>{names[2]}</td><td></td><td>failed</td>", page)
    # again into the same folder: the report's own
    assert cli("campaign", "report", str(camp), "--out", str(tmp_path / "rep"))[0] == 0


def test_a_campaign_with_no_change_has_a_page_without_a_figure(tmp_path: Path, cli: Cli) -> None:
    """...and where the folder had the forest plot of an earlier report, it is gone with it."""
    camp, names = campaign(tmp_path)
    assert cli("campaign", "report", str(camp), "--out", str(tmp_path / "rep"))[0] == 0
    assert (tmp_path / "rep" / "forest.svg").exists()  # the control: drawn while a run has a change
    for name in names[1:2]:  # the baseline alone done: no change to draw
        for p in sorted((camp / "runs" / name).rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        (camp / "runs" / name).rmdir()
    assert cli("campaign", "report", str(camp), "--out", str(tmp_path / "rep"))[0] == 0
    assert not any((tmp_path / "rep" / f"forest.{ext}").exists() for ext in ("png", "svg", "pdf"))
    assert "<svg" not in (tmp_path / "rep" / "campaign-report.html").read_text()


@pytest.mark.parametrize("where", ["user-folder", "link"])
def test_an_out_the_report_did_not_make_is_refused_before_any_write(tmp_path: Path, cli: Cli, where: str) -> None:
    camp, _ = campaign(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    out = mine if where == "user-folder" else tmp_path / "link"
    if where == "link":
        out.symlink_to(mine)
    code, _, err = cli("campaign", "report", str(camp), "--out", str(out))
    assert code == 2 and err.startswith("error: ") and "--out" in err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
