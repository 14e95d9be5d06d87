"""The demo's two lines about time: what valid time and belief time each show on the sample
corpus, asked of the running query service as a user would ask it.

Valid time is the period a document states (``from 1830 to 1841``); belief time is when
tidegraph learnt it (the record's arrival). The corpus's dispute shows both: the alliance was
valid 1830–1841 and believed current until the later document arrived; the enmity is valid
from 1842 and believed from its arrival.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx


def fact(r: dict[str, Any]) -> str:
    return f"{r['subject']} {'NOT ' if r['negated'] else ''}{r['predicate']} {r['object']}"


def _period(r: dict[str, Any]) -> str:
    return f"{r['valid_from'] or '…'}–{r['valid_to'] or '…'}"


async def time_lines(client: httpx.AsyncClient, realm: str) -> list[str]:
    """One line for valid time and one for belief time, about the realm's first relation
    superseded by another; none when nothing is superseded."""
    path = f"/v1/realms/{realm}/relations"
    listed = (await client.get(path, params={"include_superseded": "true", "limit": 1000})).json()
    by_id = {r["id"]: r for r in listed["relations"]}
    old = next((r for r in listed["relations"] if r["superseded_by"] in by_id), None)
    if old is None:
        return []
    new = by_id[old["superseded_by"]]
    pair = {"subject": old["subject"], "object": old["object"], "include_superseded": "true"}
    lines = []
    if old["valid_from"] and new["valid_from"]:
        shown = []
        for r in (old, new):
            at = await client.get(path, params={**pair, "as_of": r["valid_from"]})
            facts = [f"{fact(x)} ({_period(x)})" for x in at.json()["relations"]]
            shown.append(f"as_of={r['valid_from']}: {', '.join(facts) or 'nothing'}")
        lines.append(
            f"valid time — what held between {old['subject']} and {old['object']} then"
            f" (superseded relations included): {'; '.join(shown)}"
        )
    if _instant(old["t_created"]) < _instant(new["t_created"]):
        then = await client.get(path, params={**pair, "as_believed_at": old["t_created"]})
        was = {x["id"]: x["status"] for x in then.json()["relations"]}
        lines.append(
            f"belief time — as_believed_at={_short(old['t_created'])} (when"
            f" {', '.join(old['doc_keys'])} arrived): {fact(old)} {was.get(old['id'], '?')};"
            f" now: superseded by {fact(new)} ({old['superseded_via'] or 'a later document'}),"
            f" believed since {', '.join(new['doc_keys'])} arrived at {_short(new['t_created'])}"
        )
    return lines


def _short(stamp: str) -> str:
    return _instant(stamp).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
