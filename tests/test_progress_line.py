"""The publish progress line on a stream that is not a terminal: a line every few seconds
while documents go, then the final one — never the same line twice for a quick run."""

from __future__ import annotations

import io

from tidegraph.connectors.progress import Progress


def test_a_quick_run_off_a_terminal_prints_its_line_once() -> None:
    stream = io.StringIO()
    progress = Progress("publish", 3, stream=stream)
    for _ in range(3):
        progress.advance(1, 10)
    progress.finish()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("publish: 3/3 ")


def test_a_long_run_off_a_terminal_shows_it_advancing() -> None:
    stream = io.StringIO()
    progress = Progress("publish", 2, stream=stream)
    progress.started -= 6.0  # as if the first document went six seconds after the start
    progress.advance(1, 10)
    progress.advance(1, 10)
    progress.finish()
    lines = stream.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["publish: 1/2", "publish: 2/2"], lines


def test_disabled_prints_nothing() -> None:
    stream = io.StringIO()
    progress = Progress("publish", 1, stream=stream, enabled=False)
    progress.advance()
    progress.finish()
    assert stream.getvalue() == ""
