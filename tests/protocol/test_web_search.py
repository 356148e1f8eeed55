"""The web console's search box (issue 28, "Search and export") in a real
browser: typing a query lists the hits with their matched words marked
(``<mark>`` elements built from text, never HTML), a hit opens its thread,
and a query that is not valid FTS5 is shown as the daemon's error; a
deleted thread leaves the list."""

from __future__ import annotations

from agentd.protocol.client import Client
from tests.helpers import send_and_wait
from tests.protocol.test_web_console import driver, needs_browser, page, shared_web, web  # noqa: F401 - fixtures

HITS = "return [...document.querySelectorAll('#search-results .search-hit')]"


@needs_browser
async def test_f20_search_from_the_sidebar_and_open_a_hit(web, page):  # noqa: F811 - fixtures
    async with Client.connect(web.process.socket) as client:
        wanted = (await client.call("thread.create", title="Okapi sightings"))["threadId"]
        await send_and_wait(client, wanted, "did you see the <b>okapi</b> today?")
        other = (await client.call("thread.create", title="other"))["threadId"]
    page.open(web.url)
    page.wait_css(f".thread-row[data-thread-id='{other}']", "the threads listed")
    box = page.css("#search-box")
    box.send_keys("okapi")
    page.wait_js(HITS + ".length === 3", "three hits: the title, the message and the answer")
    marks = page.js("return [...document.querySelectorAll('#search-results mark')].map(m => m.textContent)")
    assert marks and all(m.lower() == "okapi" for m in marks)
    assert page.js("return document.querySelectorAll('#search-results b').length") == 0, "agent text is never HTML"
    assert page.js(HITS + ".every(b => b.dataset.threadId === arguments[0])", wanted)
    page.shot("hits")
    page.click("#search-results .search-hit[data-kind='user']")
    page.wait_js("return location.hash === '#thread=' + arguments[0]", "the hit's thread open", wanted)

    box.clear()
    box.send_keys('"okapi')
    page.wait_js("return !document.getElementById('error').hidden && "
                 "document.getElementById('error').textContent.includes('not valid')", "the query's error shown")
    page.shot("bad-query")

    async with Client.connect(web.process.socket) as client:
        await client.call("thread.delete", threadId=other)
    page.wait_js(f"return !document.querySelector(\".thread-row[data-thread-id='{other}']\")", "the deleted thread gone")
