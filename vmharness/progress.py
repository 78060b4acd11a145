"""The one output channel for what the harness is doing while it works.

A command's result goes to stdout (text, or JSON with --json); every line said along the way goes to
stderr, so that `--json` output stays pure and a pipe of the result never carries progress. Long work
(a sweep's points, a run's guest sessions, an image build, a boot) is wrapped in `Progress`: when stderr
is an interactive terminal, rich draws a bar with the time left above which the lines scroll; anywhere
else (a pipe, a log file, a test watching stderr) no bar is drawn and the lines are printed as they
are, one per line. rich is imported only when a bar is drawn: a command piped to a file does not pay
for it (under TCG every module costs a noticeable part of a second)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from vmharness import textsafe

if TYPE_CHECKING:
    import rich.progress

Say = Callable[[str], None]  # what the layers below are handed: `say`, or a test's list.append

_display: rich.progress.Progress | None = None  # drawn while counted work is under way on a terminal
_open = 0  # the Progress contexts drawing on it: the last one to end takes it down


def say(line: str) -> None:
    """One line of progress, on stderr (above the bar while one is drawn)."""
    text = f"  {textsafe.line(line)}"
    if _display is not None:
        _display.console.out(text, highlight=False)
    else:
        print(text, file=sys.stderr, flush=True)


def interactive() -> bool:
    """Whether stderr is a terminal rich can draw on (not a pipe, a file, or TERM=dumb)."""
    if not sys.stderr.isatty():
        return False
    from rich.console import Console

    return Console(stderr=True).is_interactive


def _start() -> rich.progress.Progress:
    from rich import progress as rp
    from rich.console import Console
    from rich.file_proxy import FileProxy

    display = rp.Progress(rp.SpinnerColumn(), rp.TextColumn("{task.description}", markup=False), rp.BarColumn(),
                          rp.MofNCompleteColumn(), rp.TimeElapsedColumn(), rp.TextColumn("left"),
                          rp.TimeRemainingColumn(), console=Console(file=textsafe.raw(sys.stderr)), transient=True,
                          redirect_stdout=False, redirect_stderr=True, refresh_per_second=4)
    display.start()  # rich draws the bar, its own escapes raw; what else goes to stderr meanwhile is escaped
    if isinstance(sys.stderr, FileProxy):  # rich's, put back by stop()
        sys.stderr = textsafe.SafeStream(sys.stderr)
    return display


class Progress:
    """Work of `total` steps (None: of unknown length, shown with its elapsed time):

        with Progress("points measured", len(todo)) as bar:
            for point in todo:
                ...
                bar.advance()

    Nested ones (a run's sessions, each session's points) share one display, one bar each."""

    def __init__(self, what: str, total: int | None) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self._task: rich.progress.TaskID | None = None

    def __enter__(self) -> Progress:
        global _display, _open
        if _display is None and interactive():
            _display = _start()
        if _display is not None:
            self._task = _display.add_task(self.what, total=self.total)
            _open += 1
        return self

    def advance(self, steps: int = 1) -> None:
        self.done += steps
        if _display is not None and self._task is not None:
            _display.update(self._task, completed=self.done)

    def grow(self, steps: int) -> None:
        """More steps than planned (e.g. iterations added until an interval is narrow enough)."""
        self.total = (self.total or 0) + steps
        if _display is not None and self._task is not None:
            _display.update(self._task, total=self.total)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        global _display, _open
        if _display is None or self._task is None:
            return
        _display.remove_task(self._task)
        self._task = None
        _open -= 1
        if _open == 0:
            display, _display = _display, None
            display.stop()
