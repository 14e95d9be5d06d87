"""What the demo must say, checked alike wherever it runs (the test suite's services, or a
fresh clone in a private folder)."""

from __future__ import annotations


def check_time_lines(said: str) -> None:
    """The demo shows what makes tidegraph bi-temporal: the periods its documents state
    (valid time) and the order they arrived in (belief time), a line each."""
    valid = [line for line in said.splitlines() if line.startswith("demo: valid time — ")]
    belief = [line for line in said.splitlines() if line.startswith("demo: belief time — ")]
    assert len(valid) == 1 and len(belief) == 1, said
    assert "as_of=1830: Charles Babbage ally_of George Airy (1830–1841);" in valid[0]
    assert valid[0].endswith("as_of=1842: Charles Babbage enemy_of George Airy (1842–…)")
    assert "(when rivalry-1.md arrived): Charles Babbage ally_of George Airy current;" in belief[0]
    assert "now: superseded by Charles Babbage enemy_of George Airy (exclusive_group)" in belief[0]
    then = belief[0].split("as_believed_at=", 1)[1].split(" ", 1)[0]
    later = belief[0].rsplit("rivalry-2.md arrived at ", 1)[1]
    assert then < later, belief[0]  # the later document arrived later: two belief instants
