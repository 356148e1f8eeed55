"""Looking after threads from the web console (SPEC F20; issue 28 "Delete and
rename", "Search and export"; issue 27 "Archiving"): rename a thread, export
it as Markdown and as JSON (a real download from a Blob URL under the page's
CSP), delete it after a confirmation — refused, with the daemon's own
message, while a run is going — and archive and unarchive it, archived
threads listed only behind "Show archived"."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import trio

from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from tests.actors.gitrepo import make_repo
from tests.helpers import script, send_and_wait
from tests.protocol.test_web_console import driver, needs_browser, page, shared_web, type_and_send, web  # noqa: F401 - fixtures


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


def count(page) -> int:
    """The number of threads the list says it shows."""
    return int(page.css("#thread-count").text.split()[0].replace(",", ""))


ROW = "return document.querySelector(`.thread-row[data-thread-id='${arguments[0]}']`)"


@needs_browser
async def test_f20_archived_threads_are_behind_a_filter_and_archived_from_the_page(web, page, tmp_path):  # noqa: F811
    """Issue 27: an archived thread leaves the list; "Show archived" lists it
    (thread.list includeArchived), marked; Archive and Unarchive in the
    header; an archive refused because of files no checkpoint holds shows the
    daemon's message naming them, and archives once they are gone."""
    repo = make_repo(tmp_path / "repo")
    async with Client.connect(web.process.socket) as client:
        shelved = (await client.call("thread.create", title="shelved earlier"))["threadId"]
        await client.call("thread.archive", threadId=shelved)
        source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
        await send_and_wait(client, source, script({"write": {"path": "agent.txt", "content": "source\n"}}))
        forked = await client.call("thread.fork", threadId=source, workspace="worktree", title="the fork")
        fork, tree = forked["threadId"], Path(forked["workspace"])
        await send_and_wait(client, fork, script({"write": {"path": "work.txt", "content": "work\n"}}))
    nested = tree / "vendor" / "lib"  # a repository inside the worktree: no checkpoint can hold it
    nested.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=nested, check=True)
    (nested / "keep.c").write_text("int x;\n")

    page.open(web.thread_url(fork))
    page.wait_css(f".thread-row[data-thread-id='{fork}'][data-parent-thread-id='{source}']", "the fork listed")
    assert not page.js(ROW, shelved), "a thread archived before the page opened is not listed"
    listed = count(page)  # the module's daemon holds other tests' threads too
    assert not page.css("#show-archived").is_selected()

    page.click(".thread-head button[data-action='archive']")
    page.wait_js("const e = document.getElementById('error'); return !e.hidden && e.textContent.includes('vendor/lib/ (nested_repository)')",
                 "the refusal naming the file")
    assert page.js(ROW, fork) and page.css(".thread-head button[data-action='archive']"), "not archived"
    assert (nested / "keep.c").exists()
    page.shot("archive-refused")

    shutil.rmtree(tree / "vendor")
    page.click(".thread-head button[data-action='archive']")
    page.wait_css(".thread-head .badge[data-archived='true']", "the thread marked archived")
    page.wait_js(f"return !({ROW.removeprefix('return ')})", "the archived thread out of the list", fork)
    assert page.css(".thread-head button[data-action='unarchive']").text == "Unarchive"
    assert not tree.exists(), "its worktree went, after a final checkpoint"
    assert count(page) == listed - 1
    page.shot("archived")

    page.click("#show-archived")
    page.wait_js(f"return document.querySelector(\".thread-row[data-thread-id='{shelved}'][data-archived='true']\")",
                 "the earlier archived thread listed, marked")
    page.wait_css(f".thread-row[data-thread-id='{fork}'][data-archived='true']", "the fork listed, marked")
    assert "archived" in page.css(f".thread-row[data-thread-id='{shelved}'] .meta").text
    assert not page.js(f"return document.querySelector(\".thread-row[data-thread-id='{source}']\").dataset.archived")
    assert count(page) == listed + 1, "the fork and the thread archived earlier"
    page.shot("show-archived")

    page.click(".thread-head button[data-action='unarchive']")
    page.wait_css(".thread-head button[data-action='archive']", "the thread listed again")
    page.wait_css(f".thread-row[data-thread-id='{fork}']:not([data-archived])", "the fork's row unmarked")
    assert not page.js("return document.querySelector('.thread-head .badge[data-archived]')")
    assert (tree / "work.txt").read_text() == "work\n", "its worktree back from the final checkpoint"

    page.click("#show-archived")
    page.wait_js(f"return !({ROW.removeprefix('return ')})", "the archived one hidden again", shelved)
    assert page.js(ROW, fork) and page.js(ROW, source)
    assert count(page) == listed
    page.shot("hidden-again")
