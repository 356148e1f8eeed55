"""Benchmark of ``thread.search`` (issue 28): a query over 10,000 threads and
1M events, target <= 50 ms, beside the floor — a bare SQLite FTS5 query on
the same index file (``SELECT rowid … MATCH ? ORDER BY rank LIMIT 20``, no
snippet; and, for a query too broad to rank in time, ``ORDER BY rowid DESC``,
the newest matches, as ``thread.search`` then answers).

It builds an LMDB store as agentd writes it (threads, runs, messages with
their events: ~10 per run), builds the search index from it
(``SearchIndex.rebuild``, timed), then times each query kind through the
path ``thread.search`` takes (``SearchIndexer.search``: a worker thread,
the join with the documents, snippets, BM25 order) and the bare query,
interleaved round by round. Words follow a Zipf law over a 20,000-word
vocabulary, so "common" matches a large share of the documents (the worst
case: BM25 scores every match before LIMIT) and "rare" a handful.
Prints medians (min-max) in ms; nothing is asserted.

    python scripts/bench_search.py [--threads 10000] [--runs 10] [--rounds 20] [--keep DIR | --reuse DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from agentd.store.batch import WriteBatch
from agentd.store.db import Store
from agentd.store.records import AppThread, ConversationMessage, Run, to_wire
from agentd.supervisor.search_indexer import SearchIndexer

VOCABULARY = 20_000
WORDS_PER_MESSAGE = 40
THREADS_PER_BATCH = 100


def words(rng: random.Random, vocabulary: list[str], weights: list[float], n: int) -> str:
    return " ".join(rng.choices(vocabulary, cum_weights=weights, k=n))


def _thread_batch(rng: random.Random, vocab: list[str], cum: list[float], first: int, count: int, runs: int,
                  now: float) -> WriteBatch:
    """``count`` threads of ``runs`` runs each, with the events agentd logs for them (~10 per run)."""
    batch = WriteBatch()
    for t in range(first, first + count):
        thread = AppThread(id=f"thr_{t:08d}", title=words(rng, vocab, cum, 4), created_at=now, updated_at=now,
                           run_count=runs)
        batch.put(thread)
        batch.event("thread.created", thread_id=thread.id, at=now, thread=to_wire(thread))
        for r in range(1, runs + 1):
            run = Run(id=f"run_{t:08d}{r:04d}", thread_id=thread.id, ordinal=r, status="completed",
                      user_message_id=f"msg_{t:08d}{r:04d}u")
            user = ConversationMessage(id=run.user_message_id or "", thread_id=thread.id, run_id=run.id, role="user",
                                       text=words(rng, vocab, cum, WORDS_PER_MESSAGE // 2))
            answer = ConversationMessage(id=f"msg_{t:08d}{r:04d}a", thread_id=thread.id, run_id=run.id,
                                         role="assistant", text=words(rng, vocab, cum, WORDS_PER_MESSAGE))
            batch.put_all(run, user, answer)
            ids = {"thread_id": thread.id, "run_id": run.id, "at": now}
            batch.event("message.created", **ids, message=to_wire(user))
            batch.event("run.queued", **ids, run={"id": run.id})
            batch.event("run.started", **ids, run={"id": run.id})
            batch.event("root_turn.started", **ids, node={"id": "n"})
            batch.event("message.created", **ids, message={"id": answer.id, "role": "assistant"})
            batch.event("message.appended", **ids, messageId=answer.id, offset=0, text=answer.text)
            batch.event("message.completed", **ids, messageId=answer.id, status="complete", length=len(answer.text))
            batch.event("root_turn.completed", **ids, node={"id": "n"})
            batch.event("attempt.completed", **ids, attempt={"id": "a"})
            batch.event("run.completed", **ids, run={"id": run.id})
    return batch


async def build_store(path: Path, threads: int, runs: int, seed: int) -> tuple[Store, list[str]]:
    rng = random.Random(seed)
    vocab = [f"w{n:05d}" for n in range(VOCABULARY)]
    cum, total = [], 0.0
    for rank in range(1, VOCABULARY + 1):
        total += 1.0 / rank
        cum.append(total)
    store = Store(path, inline_commits=True, map_size=16 << 30)
    now = time.time()
    for first in range(0, threads, THREADS_PER_BATCH):
        await store.commit(_thread_batch(rng, vocab, cum, first, min(THREADS_PER_BATCH, threads - first), runs, now))
    return store, vocab


BARE = {"bare ranked": "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 20",
        "bare newest": "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT 20"}


def bare_query(connection: sqlite3.Connection, sql: str, query: str) -> float:
    start = time.perf_counter()
    connection.execute(sql, (query,)).fetchall()
    return time.perf_counter() - start


def summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {"median": round(statistics.median(ms), 2), "min": round(min(ms), 2), "max": round(max(ms), 2)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.reuse or args.keep or tempfile.mkdtemp(prefix="bench-search-"))
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if args.reuse:
        store, vocab = Store(root / "store", map_size=16 << 30), [f"w{n:05d}" for n in range(VOCABULARY)]
    else:
        store, vocab = await build_store(root / "store", args.threads, args.runs, args.seed)
    built = time.perf_counter() - start
    indexer = SearchIndexer(store, root / "search.sqlite3")
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(indexer.serve)
        await indexer.ready.wait()
        rebuilt = time.perf_counter() - start
        assert indexer.index is not None
        queries = {"common": vocab[0], "medium": vocab[300], "rare": vocab[15_000],
                   "two words": f"{vocab[40]} {vocab[90]}", "phrase": f'"{vocab[0]} {vocab[1]}"',
                   "prefix": "w0123*"}
        out: dict[str, Any] = {"threads": args.threads, "events": store.last_seq, "documents": indexer.index.count(),
                               "store_build_s": round(built, 1), "index_build_s": round(rebuilt, 1), "queries": {}}
        bare = sqlite3.connect(indexer.path)
        for name, query in queries.items():
            ours: list[float] = []
            direct: list[float] = []
            floors: dict[str, list[float]] = {kind: [] for kind in BARE}
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                answer = await indexer.search(query, thread_id=None, limit=20)
                ours.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                indexer.index.search(query, limit=20)  # the same without the worker thread's hop
                direct.append(time.perf_counter() - t0)
                for kind, sql in BARE.items():
                    floors[kind].append(bare_query(bare, sql, query))
            floor = floors["bare ranked" if answer["ranked"] else "bare newest"]
            out["queries"][name] = {"query": query, "hits": len(answer["hits"]), "ranked": answer["ranked"],
                                    "thread.search": summary(ours), "index only": summary(direct),
                                    **{kind: summary(samples) for kind, samples in floors.items()},
                                    "ratio": round(statistics.median(ours) / max(statistics.median(floor), 1e-9), 2)}
        bare.close()
        nursery.cancel_scope.cancel()
    indexer.close()
    store.close()
    if not (args.keep or args.reuse):
        shutil.rmtree(root, ignore_errors=True)
    return out


def report(result: dict[str, Any]) -> None:
    print(f"{result['threads']} threads, {result['events']:,} events, {result['documents']:,} documents; "
          f"store built in {result['store_build_s']} s, index built in {result['index_build_s']} s")
    print("medians in ms (min-max); ratio: thread.search / the bare query of the same kind (ranked or newest)")
    print("(index only: SearchIndex.search called directly, without the worker thread's hop)")
    print(f"{'query':<10} {'ranked':<7} {'thread.search':<22} {'index only':<22} {'bare ranked':<24} "
          f"{'bare newest':<20} ratio  <= 50 ms")
    for name, q in result["queries"].items():
        cells = [f"{m['median']} ({m['min']}-{m['max']})"
                 for m in (q["thread.search"], q["index only"], q["bare ranked"], q["bare newest"])]
        print(f"{name:<10} {str(q['ranked']):<7} {cells[0]:<22} {cells[1]:<22} {cells[2]:<24} {cells[3]:<20} "
              f"{q['ratio']:>5}  {'ok' if q['thread.search']['median'] <= 50 else 'OVER'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10, help="runs per thread (~10 events each)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--keep", metavar="DIR", help="build in DIR and keep it")
    parser.add_argument("--reuse", metavar="DIR", help="measure on a data dir --keep built (no build)")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    result = trio.run(main, arguments)
    print(json.dumps(result, indent=2)) if arguments.json else report(result)
