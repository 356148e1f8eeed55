"""Looking after threads from the web console (SPEC F20; issue 28 "Delete and
rename", "Search and export"): rename a thread, export it as Markdown and as
JSON (a real download from a Blob URL under the page's CSP), and delete it
after a confirmation — refused, with the daemon's own message, while a run
is going."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from tests.helpers import script, send_and_wait
from tests.protocol.test_web_console import driver, needs_browser, page, type_and_send, web  # noqa: F401 - fixtures


async def downloaded(folder: Path, name: str, timeout: float = 30) -> str:
    """The text of download ``name`` once Chromium has finished it. Chromium
    writes ``NAME.crdownload`` and renames it when done, so the name appearing
    is the condition; the browser sends no event a test can wait on."""
    path = folder / name
    with trio.fail_after(timeout):
        while not path.exists():
            await trio.sleep(0.05)
    return path.read_text()


def allow_downloads(page, folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    page.driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)})


@needs_browser
async def test_f20_rename_export_and_delete_a_thread_from_the_page(web, page, tmp_path):  # noqa: F811 - fixtures
    async with Client.connect(web.process.socket) as client:
        thread_id = (await client.call("thread.create", title="before"))["threadId"]
        await send_and_wait(client, thread_id, "export <b>me</b>")
    downloads = tmp_path / "downloads"
    allow_downloads(page, downloads)
    page.open(web.thread_url(thread_id))
    page.wait_css(".run[data-ordinal='1'][data-status='completed']", "the thread's run")

    page.click(".thread-head button[data-action='rename']")
    box = page.wait_css("#rename-dialog[open] input[name='title']", "the rename form")
    assert box.get_attribute("value") == "before"
    box.clear()
    box.send_keys("Café <i>plans</i>")
    page.shot("rename-form")
    page.click("#rename-dialog button[data-action='save-title']")
    new = "Café <i>plans</i>"
    page.wait_js("return document.querySelector('.thread-head h2').textContent === arguments[0]", "the new title", new)
    page.wait_js(f"return document.querySelector(\".thread-row[data-thread-id='{thread_id}'] .title\").textContent === arguments[0]",
                 "the new title in the list", new)
    assert page.js("return document.querySelectorAll('.thread-head h2 i, .thread-row i').length") == 0, "a title is text"
    async with Client.connect(web.process.socket) as client:
        assert (await client.call("thread.get", threadId=thread_id))["thread"]["title"] == new

    page.click(".thread-head button[data-action='export-markdown']")
    markdown = await downloaded(downloads, f"Cafe-i-plans-i-{thread_id}.md")
    assert "export <b>me</b>" in markdown and "You said: export <b>me</b>" in markdown, markdown
    page.click(".thread-head button[data-action='export-json']")
    document = json.loads(await downloaded(downloads, f"Cafe-i-plans-i-{thread_id}.json"))
    assert document["thread"]["id"] == thread_id and document["thread"]["title"] == new
    assert [r["run"]["ordinal"] for r in document["runs"]] == [1]
    assert [m["text"] for m in document["messages"]] == ["export <b>me</b>", "You said: export <b>me</b>"]
    page.shot("exported")

    type_and_send(page, script({"tool": {"name": "build", "hang": True}}))
    page.wait_css(".node[data-kind='tool'][data-status='running']", "the tool running")
    page.click(".thread-head button[data-action='delete']")
    body = page.wait_css("#confirm-dialog[open] #confirm-body", "the delete confirmation").text
    assert "2 runs" in body and "for good" in body and "refuses until it is stopped" in body, body
    assert page.css("#confirm-ok").text == "Delete"
    page.shot("delete-confirmation-running")
    page.click("#confirm-ok")
    page.wait_js("const e = document.getElementById('error'); return !e.hidden && e.textContent.includes('stop it first')",
                 "the daemon's refusal")
    assert page.js("return document.querySelector('.thread')?.dataset.threadId") == thread_id, "still open"
    page.shot("delete-refused")

    page.click(".thread-head button[data-action='stop']")
    page.wait_css(".run[data-ordinal='2'][data-status='interrupted']", "the run stopped")
    page.click(".thread-head button[data-action='delete']")
    page.wait_css("#confirm-dialog[open]", "the confirmation again")
    page.click("#confirm-dialog button[value='cancel']")
    page.wait_js("return !document.querySelector('#confirm-dialog[open]')", "the confirmation closed")
    assert page.js("return document.querySelector('.thread')?.dataset.threadId") == thread_id, "cancel deletes nothing"
    page.click(".thread-head button[data-action='delete']")
    page.wait_css("#confirm-dialog[open]", "the confirmation, a third time")
    page.click("#confirm-ok")
    page.wait_css(f"[data-deleted-thread-id='{thread_id}']", "the view saying the thread was deleted")
    assert not page.js(f"return document.querySelector(\".thread-row[data-thread-id='{thread_id}']\")"), "gone from the list"
    assert page.js("return location.hash") == ""
    page.shot("deleted")
    async with Client.connect(web.process.socket) as client:
        try:
            await client.call("thread.get", threadId=thread_id)
        except AgentdError as exc:
            assert exc.kind == "not_found"
        else:
            raise AssertionError("the thread is still stored")
