"""examples/igraph_mirror.py, fed only by the change feed of a corpus streamed through the
real pipeline, answers a neighbourhood question as the query service does."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable

import pytest

from tidegraph.client import Client
from tidegraph.infra.package_files import sample_corpus

from surface_helpers import REPO, live_pipeline, spawn_serve

pytestmark = [pytest.mark.postgres, pytest.mark.kafka, pytest.mark.slow]


def service_neighbourhood(tg: Client, realm: str, name: str, hops: int) -> dict[str, object]:
    """The same question through the query service's relation listing, hop by hop."""
    seen, frontier = {name}, {name}
    relations: set[tuple[str, str, str, bool]] = set()
    for _ in range(hops):
        reached: set[str] = set()
        for entity in sorted(frontier):
            for side in ("subject", "object"):
                page = tg.relations(realm, space="default", limit=1000, **{side: entity})
                for r in page.relations:
                    relations.add((r.subject, r.predicate, r.object, r.negated))
                    reached |= {r.subject, r.object} - seen
        seen |= reached
        frontier = reached
    return {
        "entities": sorted({name} | {n for s, _, o, _ in relations for n in (s, o)}),
        "relations": [list(r) for r in sorted(relations)],
    }


async def test_mirror_answers_as_the_query_service(
    pg_dsn: str, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    realm, prefix = unique_name("m"), unique_name("mp")
    async with live_pipeline(kafka_bootstrap, pg_dsn, realm, prefix) as live:
        names = sorted(p.name for p in sample_corpus().glob("*.md"))
        await live.publish(live.corpus(*[n for n in names if n != "rivalry-2.md"]))
        await live.publish(live.corpus("rivalry-2.md"))  # supersedes the alliance
    with spawn_serve(pg_dsn, kafka_bootstrap, prefix, realms=(realm,)) as url:
        with Client(url) as tg:
            for hops in (1, 2):
                want = service_neighbourhood(tg, realm, "Charles Babbage", hops)
                run = await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(REPO / "examples" / "igraph_mirror.py"),
                    realm,
                    "Charles Babbage",
                    "--hops",
                    str(hops),
                    env={**os.environ, "TIDEGRAPH_URL": url},
                    stdout=asyncio.subprocess.PIPE,
                )
                stdout, _ = await asyncio.wait_for(run.communicate(), 120)
                assert run.returncode == 0
                got = json.loads(stdout)
                assert {k: got[k] for k in want} == want
                assert got["after_id"] == list(tg.subscribe(realm, follow=False))[-1].id
            triples = {tuple(r[:3]) for r in want["relations"]}  # type: ignore[attr-defined]
            assert ("Charles Babbage", "enemy_of", "George Airy") in triples
            assert ("Charles Babbage", "ally_of", "George Airy") not in triples
            assert len(want["entities"]) > 5  # type: ignore[arg-type]
