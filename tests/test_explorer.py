"""The graph explorer (``GET /ui``) in a real headless Chromium over a corpus streamed
through the real pipeline: no console error, a search draws the neighbourhood the API
describes, belief time moved back shows a superseded relation as it was, and a document
published meanwhile appears in the live panel. Screenshots go to the test's tmp folder."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
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
    """fact → (state, negated) of every drawn relation."""
    return {
        e.get_attribute("data-fact") or "": (
            e.get_attribute("data-state") or "",
            e.get_attribute("data-negated") == "true",
        )
        for e in driver.find_elements(By.CSS_SELECTOR, "#graph .edge")
    }


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
            key.send_keys(KEY, Keys.TAB)
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
            driver.save_screenshot(str(tmp_path / "explorer-details.png"))

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

            # a document published now shows up in the live panel
            await live.publish(
                [upsert(realm, "news.md", "Ada Lovelace worked with Michael Faraday.")]
            )
            await until(
                lambda: driver.find_elements(
                    By.CSS_SELECTOR, "#changes li[data-doc-key='news.md']"
                ),
                "the live panel",
            )
            driver.save_screenshot(str(tmp_path / "explorer-live.png"))
            assert console_errors(driver) == []

            # the page reaches only what its key reaches
            key.clear()
            key.send_keys("not-a-key", Keys.TAB)
            await until(lambda: "401" in driver.find_element(By.ID, "status").text, "a refusal")
            tg.close()
    print(f"screenshots in {tmp_path}")
