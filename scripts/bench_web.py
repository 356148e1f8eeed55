"""The web console's measures (issue 15), taken in the browser with the
Performance API against a real daemon:

1. the page is usable (the thread list drawn and painted) <= 300 ms after it
   loaded (DOMContentLoaded: its modules are in), on a store of 10,000
   threads (the list pages and virtualizes); the time from navigation is
   printed too;
2. a thread with 1,000 runs renders <= 1 s (from asking for it to its view
   painted, on a fresh load of the page);
3. a 10,000-delta answer streams without a long task over 50 ms
   (PerformanceObserver "longtask").

Browser time is wall-clock time: on a busy machine every number grows.
Needs Debian's chromium and chromium-driver and Selenium (the test extra).
Prints each measure and whether it met its target; exits 1 if one did not.

    python scripts/bench_web.py [--threads 10000] [--runs 1000] [--deltas 10000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def wait_js(driver, body: str, *args, timeout: float = 120):
    """Wait, on DOM changes, until ``body`` returns something truthy."""
    driver.set_script_timeout(timeout)
    return driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const args = Array.prototype.slice.call(arguments, 0, -1);
        const test = () => { try { return (function () { %s }).apply(null, args); } catch (e) { return false; } };
        if (test()) { done(test()); return; }
        const o = new MutationObserver(() => { const v = test(); if (v) { o.disconnect(); done(v); } });
        o.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
    """ % body, *args)


async def fill(client: Client, threads: int) -> None:
    """``threads`` threads, created 32 at a time."""
    limiter = trio.Semaphore(32)

    async def one(i: int) -> None:
        async with limiter:
            await client.call("thread.create", title=f"bench thread {i}")

    async with trio.open_nursery() as nursery:
        for i in range(threads):
            nursery.start_soon(one, i)


async def many_runs(client: Client, runs: int) -> str:
    """A thread with ``runs`` completed runs (queued behind each other)."""
    thread_id = (await client.call("thread.create", title=f"{runs} runs"))["threadId"]
    last = None
    for i in range(runs):  # each starts, or queues behind the active one
        last = (await client.call("thread.message.send", threadId=thread_id, text=f"message {i}"))["runId"]
    while (await client.call("run.get", runId=last))["run"]["status"] != "completed":
        await trio.sleep(0.5)
    return thread_id


def page_load(driver, url: str) -> dict[str, float]:
    driver.get("about:blank")
    driver.get(url)
    wait_js(driver, "return window.agentdPerf && window.agentdPerf.marks['agentd:list-ready']")
    return driver.execute_script(
        "const n = performance.getEntriesByType('navigation')[0];"
        "return {listReady: agentdPerf.marks['agentd:list-ready'], loaded: n.domContentLoadedEventEnd,"
        " rows: document.querySelectorAll('.thread-row').length, longest: Math.max(0, ...agentdPerf.longTasks)}")


def thread_load(driver, url: str) -> dict[str, float]:
    driver.get("about:blank")
    driver.get(url)
    wait_js(driver, "return window.agentdPerf && window.agentdPerf.marks['agentd:thread-ready']")
    return driver.execute_script("return {threadReady: agentdPerf.marks['agentd:thread-ready'], threadRender: agentdPerf.threadRender,"
                                 " runs: document.querySelectorAll('.run').length, longest: Math.max(0, ...agentdPerf.longTasks)}")


async def main_async(args: argparse.Namespace) -> int:
    data = Path(tempfile.mkdtemp(prefix="agentd-bench-web-"))
    daemon = await start_daemon(data / "data", data / "s.sock", extra_args=["--websocket-port", "0", "--web"])
    results: dict[str, object] = {}
    ok = True
    driver = None
    try:
        async with Client.connect(daemon.socket) as client:
            t0 = time.perf_counter()
            await fill(client, args.threads)
            print(f"made {args.threads:,} threads in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            t0 = time.perf_counter()
            runs_thread = await many_runs(client, args.runs)
            print(f"made a thread of {args.runs:,} runs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            web = (await client.call("daemon.status"))["web"]
        token = (data / "data" / "websocket.token").read_text().strip()
        url = f"{web}#token={token}"
        driver = browser()

        loads = [page_load(driver, url) for _ in range(args.rounds)]
        after_load = statistics.median(r["listReady"] - r["loaded"] for r in loads)
        results["list"] = {"threads": args.threads, "usable_after_load_ms": [round(r["listReady"] - r["loaded"]) for r in loads],
                           "from_navigation_ms": [round(r["listReady"]) for r in loads],
                           "median_ms": round(after_load), "rows_in_dom": loads[-1]["rows"], "target_ms": 300}
        ok &= after_load <= 300

        threads = [thread_load(driver, f"{url}&thread={runs_thread}") for _ in range(args.rounds)]
        render = statistics.median(r["threadRender"] for r in threads)
        results["thread"] = {"runs": args.runs, "render_ms": [round(r["threadRender"]) for r in threads],
                             "from_navigation_ms": [round(r["threadReady"]) for r in threads],
                             "median_ms": round(render), "target_ms": 1000, "runs_drawn": threads[-1]["runs"]}
        ok &= render <= 1000

        async with Client.connect(daemon.socket) as client:
            stream_thread = (await client.call("thread.create", title="deltas"))["threadId"]
            thread_load(driver, f"{url}&thread={stream_thread}")
            driver.execute_script("agentdPerf.longTasks.length = 0")
            text = ("lorem ipsum dolor sit amet " * args.deltas)[: args.deltas]  # prose: one code point per delta
            step = {"say": text, "chunks": args.deltas}
            t0 = time.perf_counter()
            await client.call("thread.message.send", threadId=stream_thread, text="@script\n" + json.dumps([step]))
            wait_js(driver, "return [...document.querySelectorAll('.msg[data-role=assistant] .text')].some(e => e.textContent.length === arguments[0])",
                    args.deltas)
            elapsed = time.perf_counter() - t0
        long_tasks = driver.execute_script("return agentdPerf.longTasks")
        results["stream"] = {"deltas": args.deltas, "seconds": round(elapsed, 2), "long_tasks": len(long_tasks),
                             "longest_task_ms": round(max(long_tasks, default=0)), "target_ms": 50}
        ok &= max(long_tasks, default=0) <= 50
    finally:
        if driver is not None:
            driver.quit()
        await daemon.terminate()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        lst, thr, st = results["list"], results["thread"], results["stream"]
        print(f"thread list, {lst['threads']:,} threads: usable {lst['median_ms']} ms after the page loaded (median of "
              f"{lst['usable_after_load_ms']}; target 300; {lst['from_navigation_ms']} ms from navigation), "
              f"{lst['rows_in_dom']} rows in the DOM")
        print(f"thread of {thr['runs']:,} runs: drawn in {thr['median_ms']} ms (median of {thr['render_ms']}; target 1000), "
              f"{thr['from_navigation_ms']} ms from navigation")
        print(f"answer of {st['deltas']:,} deltas: {st['seconds']} s, {st['long_tasks']} long tasks, longest {st['longest_task_ms']} ms (target <= 50)")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    return trio.run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
