"""A pytest the launcher stops (tests/streams.py: its deadline, or its own Ctrl-C or SIGTERM) ends after
the test it is in, with its teardowns, even where that test's command took the launcher's SIGINT as its
own. The unit tier runs the harness's commands in its own process (`vmharness.cli.main`, for speed), and
a command's signal handling turns a SIGINT that comes meanwhile into its own "interrupted by SIGINT" (exit
130): the test goes on, or fails, and pytest never hears of the Ctrl-C. Seen on 2026-12-04: a clean
clone stopped by SIGTERM had its rig stream's unit pytest run on for the launcher's whole grace (60 s),
then killed. So the launcher also leaves a mark (a file named by the environment) before its SIGINT, and
this plugin stops the session once the test it is in has ended, as `-x` does after a failure."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

MARK = "VMHARNESS_TEST_STOP"  # the environment's name for the launcher's stop mark


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, None]:
    yield
    mark = os.environ.get(MARK)
    if mark and os.path.exists(mark):
        item.session.shouldstop = "the test launcher is stopping"
