"""The graph explorer (``GET /ui``) in a real headless Chromium over a corpus streamed
through the real pipeline: no console error; a search draws the neighbourhood the API
describes, with no label over another, no edge through a node it does not join and the
drawing spread over the canvas (read from the page's boxes and from a screenshot); a
relation's details show its belief history as a timeline and "superseded by" jumps to the
superseding relation; both time fields take what the API takes (a date, a year), an error
clears the graph; a document published meanwhile appears in the live panel and redraws the
graph and the realm menu without a click; the key applies as it is typed. Screenshots go to
the test's tmp folder."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from png_pixels import changed_share, decode, inked_extent
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tidegraph.client import Client

from indexer_helpers import upsert
from surface_helpers import live_pipeline, spawn_serve

pytestmark = [pytest.mark.postgres, pytest.mark.kafka, pytest.mark.slow]

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
KEY = "explorer-key"


def ensure_chromium() -> None:
    """Debian's chromium and chromium-driver, installed here when missing and possible."""
    if os.path.exists(CHROMIUM) and os.path.exists(DRIVER):
        return
    if shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"], check=True, env=env
        )
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        pytest.fail("needs chromium and chromium-driver (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    ensure_chromium()
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


async def until(check: Callable[[], Any], what: str, limit: float = 30) -> Any:
    """Poll ``check`` without blocking the loop (the indexer runs on it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while True:
        result = check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def drawn(driver: webdriver.Chrome) -> dict[str, tuple[str, bool]]:
    """fact → (state, negated) of every drawn relation, read in one go (a live redraw may
    replace the elements between two reads)."""
    found: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll('#graph .edge')].map("
        "(e) => [e.dataset.fact, e.dataset.state, e.dataset.negated])"
    )
    return {fact: (state, negated == "true") for fact, state, negated in found}


def api_neighbourhood(tg: Client, realm: str, name: str, hops: int, **time: Any) -> set[str]:
    seen, frontier, facts = {name}, {name}, set()
    for _ in range(hops):
        reached: set[str] = set()
        for entity in frontier:
            for subject, object_ in ((entity, None), (None, entity)):
                page = tg.relations(
                    realm,
                    subject=subject,
                    object=object_,
                    include_superseded=True,
                    limit=1000,
                    **time,
                )
                for r in page.relations:
                    facts.add(f"{r.subject}|{r.predicate}|{r.object}")
                    reached |= {r.subject, r.object} - seen
        seen |= reached
        frontier = reached
    return facts


def console_errors(driver: webdriver.Chrome) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


GEOMETRY = """
const svg = document.getElementById("graph");
const labels = [...svg.querySelectorAll("text")].map((t) => {
  const r = t.getBoundingClientRect();
  return {text: t.textContent, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom};
});
const nodes = [...svg.querySelectorAll(".node")].map((g) => {
  const c = g.querySelector("circle");
  return {name: g.dataset.name, x: +c.getAttribute("cx"), y: +c.getAttribute("cy"),
          r: +c.getAttribute("r")};
});
const edges = [...svg.querySelectorAll(".edge")].map((g) => {
  const path = g.querySelector(".line"), length = path.getTotalLength(), points = [];
  for (let i = 0; i <= 60; i++) {
    const p = path.getPointAtLength((length * i) / 60);
    points.push([p.x, p.y]);
  }
  return {fact: g.dataset.fact, points};
});
const box = svg.getBoundingClientRect();
return {labels, nodes, edges, width: box.width, height: box.height,
        left: box.left, top: box.top};
"""


def check_geometry(driver: webdriver.Chrome) -> None:
    """What a reader needs: every label readable (none over another, all on the canvas),
    every edge visibly between its own ends (never through another node), and the
    neighbourhood spread over the canvas rather than bunched in a corner of it."""
    g: dict[str, Any] = driver.execute_script(GEOMETRY)
    labels = g["labels"]
    assert labels and g["edges"]
    for i, a in enumerate(labels):
        assert a["x0"] >= g["left"] - 1 and a["x1"] <= g["left"] + g["width"] + 1, a
        assert a["y0"] >= g["top"] - 1 and a["y1"] <= g["top"] + g["height"] + 1, a
        for b in labels[i + 1 :]:
            apart = (
                a["x1"] <= b["x0"] or b["x1"] <= a["x0"] or a["y1"] <= b["y0"] or b["y1"] <= a["y0"]
            )
            assert apart, f"label {a['text']!r} overlaps {b['text']!r}"
    for edge in g["edges"]:
        ends = edge["fact"].split("|")[0::2]
        for node in g["nodes"]:
            if node["name"] in ends:
                continue
            nearest = min(
                ((x - node["x"]) ** 2 + (y - node["y"]) ** 2) ** 0.5 for x, y in edge["points"]
            )
            assert nearest > node["r"] + 4, f"{edge['fact']} runs through {node['name']}"
    xs = [n["x"] for n in g["nodes"]]
    ys = [n["y"] for n in g["nodes"]]
    assert (max(xs) - min(xs)) / g["width"] > 0.7 and (max(ys) - min(ys)) / g["height"] > 0.7, g


def canvas_shot(driver: webdriver.Chrome, path: Path) -> bytes:
    png: bytes = driver.find_element(By.ID, "canvas").screenshot_as_png
    path.write_bytes(png)
    return png


async def test_explorer_in_headless_chromium(
    browser: webdriver.Chrome,
    pg_dsn: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    realm, prefix = unique_name("u"), unique_name("up")
    driver = browser
    async with live_pipeline(kafka_bootstrap, pg_dsn, realm, prefix) as live:
        names = sorted(p.name for p in (live.corpus_dir).glob("*.md"))
        await live.publish(live.corpus(*[n for n in names if n != "rivalry-2.md"]))
        await live.publish(live.corpus("rivalry-2.md"))
        with spawn_serve(
            pg_dsn, kafka_bootstrap, prefix, realms=(realm,), api_keys=f"{KEY}={realm}"
        ) as url:
            tg = Client(url, KEY)
            both = tg.relations(
                realm, subject="Charles Babbage", object="George Airy", include_superseded=True
            ).relations
            ally = next(r for r in both if r.predicate == "ally_of")
            enemy = next(r for r in both if r.predicate == "enemy_of")
            assert ally.status == "superseded" and enemy.status == "current"

            driver.get(f"{url}/ui?realm={realm}")
            await until(
                lambda: driver.execute_script("return document.readyState") == "complete", "load"
            )
            key = driver.find_element(By.ID, "key")
            assert "required" in (key.get_attribute("placeholder") or "")  # keys are checked
            key.send_keys(KEY)  # applied as typed: no Enter, no Tab
            await until(
                lambda: driver.find_elements(By.CSS_SELECTOR, f"#realm option[value='{realm}']"),
                "the realm list",
            )
            driver.find_element(By.ID, "entity").send_keys("Babbage")  # an alias
            driver.find_element(By.ID, "go").click()
            await until(
                lambda: "relation(s) around" in driver.find_element(By.ID, "status").text,
                "a drawing",
            )
            shown = drawn(driver)
            assert set(shown) == api_neighbourhood(tg, realm, "Charles Babbage", 2)
            assert shown["Charles Babbage|ally_of|George Airy"][0] == "superseded"
            assert shown["Charles Babbage|enemy_of|George Airy"][0] == "current"
            superseded = driver.find_element(By.CSS_SELECTOR, f"#graph .edge[data-id='{ally.id}']")
            assert "superseded" in (superseded.get_attribute("class") or "")
            driver.save_screenshot(str(tmp_path / "explorer-search.png"))
            check_geometry(driver)
            drawn_before = decode(canvas_shot(driver, tmp_path / "canvas-search.png"))
            wide, high = inked_extent(drawn_before, (255, 255, 255), skip_bottom=40)
            assert wide > 0.75 and high > 0.75, (wide, high)  # the canvas is used, not a third

            # relation details: periods, weight, documents and passages behind it
            driver.execute_script(
                "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", superseded
            )
            await until(
                lambda: driver.find_elements(By.CSS_SELECTOR, "#details blockquote"), "passages"
            )
            facts = driver.find_element(By.ID, "relation-facts").text
            assert (
                "superseded" in facts
                and "weight" in facts
                and ally.t_created.year == int(facts.split("believed")[1].strip()[:4])
            )
            assert "rivalry-1.md" in driver.find_element(By.ID, "relation-docs").text
            assert "ally of George Airy" in driver.find_element(By.ID, "details").text
            # the belief history as a timeline: one segment per interval the API holds
            history = tg.relation_history(realm, ally.id).history
            await until(
                lambda: (
                    len(driver.find_elements(By.CSS_SELECTOR, "#timeline rect.segment"))
                    == len(history)
                ),
                "the timeline",
            )
            segments = driver.find_elements(By.CSS_SELECTOR, "#timeline rect.segment")
            assert [x.get_attribute("data-state") for x in segments] == [i.state for i in history]
            assert [i.state for i in history] == ["current", "superseded"]
            driver.save_screenshot(str(tmp_path / "explorer-details.png"))

            # "superseded by" names the later relation and jumps to it
            link = driver.find_element(By.CSS_SELECTOR, "#superseded-by a.jump")
            await until(lambda: link.text == "Charles Babbage enemy_of George Airy", "its name")
            link.click()
            await until(
                lambda: (
                    "selected"
                    in (
                        driver.find_element(
                            By.CSS_SELECTOR, f"#graph .edge[data-id='{enemy.id}']"
                        ).get_attribute("class")
                        or ""
                    )
                ),
                "the jump",
            )
            heading = driver.find_element(By.CSS_SELECTOR, "#details h2")
            assert heading.text == "Charles Babbage enemy_of George Airy"

            # belief time between the two rivalry documents: the alliance as it was
            between = ally.t_created + (enemy.t_created - ally.t_created) / 2
            believed = driver.find_element(By.ID, "believed")
            believed.send_keys(between.isoformat().replace("+00:00", "Z"))
            driver.find_element(By.ID, "apply-time").click()
            await until(
                lambda: "as believed at" in driver.find_element(By.ID, "status").text, "a redraw"
            )
            then = drawn(driver)
            assert then["Charles Babbage|ally_of|George Airy"] == ("current", False)
            assert "Charles Babbage|enemy_of|George Airy" not in then
            assert set(then) == api_neighbourhood(
                tg, realm, "Charles Babbage", 2, as_believed_at=between
            )
            driver.save_screenshot(str(tmp_path / "explorer-believed.png"))

            # the download button: the graph as believed then, fetched with the key
            driver.find_element(By.ID, "download").click()
            await until(
                lambda: "downloaded" in driver.find_element(By.ID, "status").text, "a download"
            )
            status = driver.find_element(By.ID, "status").text
            assert f"{realm}-" in status and status.endswith(".graphml"), status

            # both time fields take what the API takes: a date is the end of that day
            async def redraw_with(believed: str, as_of: str) -> str:
                for field, value in (("believed", believed), ("as-of", as_of)):
                    box = driver.find_element(By.ID, field)
                    box.clear()
                    box.send_keys(value)
                driver.find_element(By.ID, "apply-time").click()
                await until(
                    lambda: f"{believed or as_of}" in driver.find_element(By.ID, "status").text,
                    f"a redraw at {believed or as_of}",
                )
                return str(driver.find_element(By.ID, "status").text)

            said = await redraw_with("2020-01-01", "")
            assert "error" not in (
                driver.find_element(By.ID, "status").get_attribute("class") or ""
            )
            assert said.startswith("0 relation(s)") and not drawn(driver)  # nothing believed yet
            await redraw_with("", "1830")  # valid time: the alliance held then, the enmity not
            then = drawn(driver)
            assert then["Charles Babbage|ally_of|George Airy"][0] == "superseded"
            assert "Charles Babbage|enemy_of|George Airy" not in then
            assert set(then) == api_neighbourhood(tg, realm, "Charles Babbage", 2, as_of="1830")
            # an error clears the graph: nothing stale stays under it
            await redraw_with("2020-13", "")
            status = driver.find_element(By.ID, "status")
            assert "error" in (status.get_attribute("class") or "") and "422" in status.text
            assert drawn(driver) == {}
            assert "422" in driver.find_element(By.CSS_SELECTOR, "#graph .message").text
            await redraw_with("", "")
            await until(lambda: len(drawn(driver)) == len(shown), "the full neighbourhood")
            before = decode(canvas_shot(driver, tmp_path / "canvas-before-live.png"))

            # a document published now: the live panel lists it, and the graph and the realm
            # menu redraw without a click
            menu = driver.find_element(By.CSS_SELECTOR, f"#realm option[value='{realm}']")
            assert "(7 docs" in menu.text
            await live.publish(
                [upsert(realm, "news.md", "Charles Babbage worked with Michael Faraday.")]
            )
            await until(
                lambda: driver.find_elements(
                    By.CSS_SELECTOR, "#changes li[data-doc-key='news.md']"
                ),
                "the live panel",
            )
            await until(
                lambda: "Charles Babbage|worked_with|Michael Faraday" in drawn(driver),
                "the graph redrawn live",
            )
            await until(
                lambda: (
                    "(8 docs"
                    in driver.find_element(By.CSS_SELECTOR, f"#realm option[value='{realm}']").text
                ),
                "the realm menu redrawn",
            )
            assert set(drawn(driver)) == api_neighbourhood(tg, realm, "Charles Babbage", 2)
            check_geometry(driver)
            after = decode(canvas_shot(driver, tmp_path / "canvas-after-live.png"))
            assert changed_share(before, after) > 0.005  # the picture itself changed
            driver.save_screenshot(str(tmp_path / "explorer-live.png"))
            deliberate = "as_believed_at=2020-13 - Failed to load resource: the server responded"
            assert [e for e in console_errors(driver) if deliberate not in e] == []

            # the page reaches only what its key reaches
            key.clear()
            key.send_keys("not-a-key", Keys.TAB)
            await until(lambda: "401" in driver.find_element(By.ID, "status").text, "a refusal")
            tg.close()
    print(f"screenshots in {tmp_path}")
