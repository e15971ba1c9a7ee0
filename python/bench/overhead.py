"""What calling tenure from Python costs: per-operation latency from one
asyncio task, and 1,000 keeper-held leases from one event loop.

    python bench/overhead.py --backend sqlite|redis [--url URL] [--ops N]
                             [--leases L] [--hb-ttl SECONDS]

1. **Per operation** (one task, one call at a time, each timed around its
   ``await``): ``admit`` (a fresh id and scope, ttl 60 s), ``renew`` (of
   those claims), ``transition`` to ``running`` (the move the Rust benchmark
   times), ``transition`` to ``succeeded``, and ``check_fence`` (a growing
   fence on one resource). p50 / p90 / p99 in microseconds. The first row,
   ``(thread round trip)``, is no store call: a pure-Python round trip to a
   worker thread and back, the floor any binding that runs its calls on
   other threads pays per call on this machine.

   The Rust figures to compare are the ``single-op`` scenario of the
   ``tenure-benches`` crate (one worker, one call at a time: admit with a
   fresh id and one scope, renew, transition Pending -> Running; it reports
   p50 / p99 / p999, no p90)::

       cargo run -p tenure-benches --release -- --backend sqlite --scenario single-op
       TENURE_REDIS_URL=redis://127.0.0.1:6379 \\
         cargo run -p tenure-benches --release -- --backend redis --scenario single-op

   It has no ``check_fence`` and no transition to ``succeeded``; the
   Python rows for those have no Rust counterpart there.

2. **Keeper-held leases**: one ``tenure.Keeper`` (ttl ``--hb-ttl``, default
   10 s, so a beat of ttl / 3) and ``--leases`` (default 1,000) tasks, each
   inside ``async with keeper.admit(...)`` sleeping for three beats.
   A missed deadline is a run whose ``loss`` is not ``None`` or whose block
   raised ``OwnershipLostError``; the expected count is 0.

The default URL is a SQLite file in a temporary directory (``--backend
sqlite``) or ``redis://127.0.0.1:6379`` with a fresh namespace
(``--backend redis``). Build the package in release mode for figures:
``maturin develop --release``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid

import tenure


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))
    return ordered[index]


def row(name: str, samples_ns: list[int], wall: float) -> str:
    us = [s / 1000 for s in samples_ns]
    return (f"  {name:22} {len(us):>7} {percentile(us, .50):>9.1f} {percentile(us, .90):>9.1f}"
            f" {percentile(us, .99):>9.1f} {statistics.fmean(us):>9.1f} {len(us) / wall:>10.0f}")


async def timed(calls) -> tuple[list[int], float, list]:
    samples, answers = [], []
    clock = time.perf_counter_ns
    started = time.perf_counter()
    for call in calls:
        before = clock()
        answer = await call()
        samples.append(clock() - before)
        answers.append(answer)
    return samples, time.perf_counter() - started, answers


async def thread_round_trip(ops: int) -> None:
    """The floor of any thread-backed asyncio binding on this machine: one
    pure-Python round trip to a worker thread and back (queue in, then
    ``call_soon_threadsafe`` out), with no store behind it."""
    import queue
    import threading

    loop = asyncio.get_running_loop()
    requests: "queue.SimpleQueue[asyncio.Future | None]" = queue.SimpleQueue()

    def worker() -> None:
        while (future := requests.get()) is not None:
            loop.call_soon_threadsafe(future.set_result, None)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()

    def round_trip() -> "asyncio.Future[None]":
        future = loop.create_future()
        requests.put(future)
        return future

    samples, wall, _ = await timed(round_trip for _ in range(ops))
    requests.put(None)
    print(row("(thread round trip)", samples, wall))


async def per_operation(store: tenure.Store, ops: int, tag: str) -> bool:
    print(f"per operation, one task, {ops} calls each (microseconds)")
    print(f"  {'operation':22} {'calls':>7} {'p50':>9} {'p90':>9} {'p99':>9} {'mean':>9} {'ops/s':>10}")
    await thread_round_trip(ops)
    ok = True
    # warm-up: connections, statements, the runtime's threads
    for i in range(min(50, ops)):
        await store.admit(f"warm-{tag}-{i}", "bench", scopes=[f"warm-{tag}-{i}"], ttl=60)

    samples, wall, answers = await timed(
        (lambda i=i: store.admit(f"op-{tag}-{i}", "bench", scopes=[f"scope-{tag}-{i}"], ttl=60))
        for i in range(ops))
    ok &= all(isinstance(a, tenure.Admitted) for a in answers)
    print(row("admit", samples, wall))
    claims = [a.record.claim() for a in answers]

    samples, wall, answers = await timed((lambda c=c: store.renew(c, 60)) for c in claims)
    ok &= all(isinstance(a, tenure.Renewed) for a in answers)
    print(row("renew", samples, wall))

    samples, wall, answers = await timed((lambda c=c: store.transition(c, "running")) for c in claims)
    ok &= all(isinstance(a, tenure.Applied) for a in answers)
    print(row("transition running", samples, wall))

    samples, wall, answers = await timed((lambda c=c: store.transition(c, "succeeded")) for c in claims)
    ok &= all(isinstance(a, tenure.Applied) for a in answers)
    print(row("transition succeeded", samples, wall))

    resource = f"gate-{tag}"
    samples, wall, answers = await timed(
        (lambda f=f: store.check_fence(resource, f)) for f in range(1, ops + 1))
    ok &= all(isinstance(a, tenure.Accepted) for a in answers)
    print(row("check_fence", samples, wall))
    if not ok:
        print("  an operation answered something unexpected")
    return ok


async def held_leases(store: tenure.Store, leases: int, ttl: float, tag: str) -> bool:
    beat = ttl / 3
    print(f"\n{leases} keeper-held leases from one event loop: ttl {ttl} s, beat {beat:.2f} s, "
          f"each held for 3 beats")
    lost, not_admitted, raised, errors = [], [], [], []
    admit_ns: list[int] = []
    all_admitted = asyncio.Event()
    admitted = 0

    async def hold(keeper: tenure.Keeper, i: int) -> None:
        nonlocal admitted
        before = time.perf_counter_ns()
        try:
            async with keeper.admit(f"hb-{tag}-{i}", scopes=[f"hb-{tag}-{i}"]) as run:
                admit_ns.append(time.perf_counter_ns() - before)
                admitted += 1
                if admitted == leases:
                    all_admitted.set()
                await asyncio.sleep(3 * beat)
                if run.loss is not None:
                    lost.append((run.id, run.loss))
        except tenure.NotAdmitted as refused:
            not_admitted.append(refused.outcome)
        except tenure.OwnershipLostError as error:
            raised.append((error.id, error.cause))
        except Exception as error:  # noqa: BLE001 (counted and shown)
            errors.append(repr(error))

    started = time.perf_counter()
    async with tenure.Keeper(store, ttl=ttl, worker_id=f"bench-{tag}") as keeper:
        tasks = [asyncio.create_task(hold(keeper, i)) for i in range(leases)]
        await asyncio.wait_for(all_admitted.wait(), timeout=10 * ttl)
        admitted_after = time.perf_counter() - started
        held_peak = keeper.held_count
        await asyncio.gather(*tasks)
    wall = time.perf_counter() - started
    missed = len(lost) + len(raised)
    print(row("admit (keeper)", admit_ns, admitted_after))
    print(f"  all {leases} admitted after {admitted_after:.2f} s; held at once: {held_peak}; "
          f"total {wall:.2f} s")
    print(f"  missed deadlines: {missed} (loss set: {len(lost)}, OwnershipLostError: {len(raised)}); "
          f"not admitted: {len(not_admitted)}; errors: {len(errors)}")
    for each in (lost + raised + errors)[:5]:
        print(f"    {each}")
    return missed == 0 and not not_admitted and not errors


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "redis"], required=True)
    parser.add_argument("--url", help="the store (default: a temp SQLite file / local Redis)")
    parser.add_argument("--ops", type=int, default=2000, help="calls per operation (default 2000)")
    parser.add_argument("--leases", type=int, default=1000, help="keeper-held leases (default 1000)")
    parser.add_argument("--hb-ttl", type=float, default=10.0, help="their keeper's ttl (default 10)")
    options = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    url = options.url
    if url is None and options.backend == "sqlite":
        url = "sqlite://" + os.path.join(tempfile.mkdtemp(prefix="tenure-bench-"), "bench.db")
    elif url is None:
        url = f"redis://127.0.0.1:6379?namespace=py_bench_{tag}"
    store = await tenure.connect(url)
    print(f"tenure {tenure.__version__}, Python {sys.version.split()[0]}, store {store.url}\n")
    ok = await per_operation(store, options.ops, tag)
    if options.leases > 0:
        ok &= await held_leases(store, options.leases, options.hb_ttl, tag)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
