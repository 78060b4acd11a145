"""The one error type the CLI turns into a one-line message, a hint and exit code 2."""

from __future__ import annotations

from vmharness.textsafe import clean


class HarnessError(Exception):
    """An expected failure: bad input, a missing tool, a host that cannot do what was asked."""

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        """`error:` and `hint:` lines, with any control character a value brought escaped (textsafe)."""
        lines = [f"error: {self.message}"]
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return clean("\n".join(lines))
