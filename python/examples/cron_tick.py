"""A clustered cron scheduler on tenure: several scheduler processes fire
the same schedule, each tick is delivered by exactly one of them.

Ported: the fire-claim of a clustered cron scheduler (Quartz's clustered
JobStore, where every node tries to acquire the due trigger and records a
fired-trigger row that it keeps checked in while the job runs; the nodes
that lose the acquisition skip the tick). The claim has three states as the
firing node sees it, and each maps onto a ``tenure.TickOutcome``:

* **fired here**: this node won the tick and ran the job: ``"delivered"``, or
  ``"delivery_failed"`` (``error``) when the job raised;
* **fired elsewhere**: another node owns the tick: ``"elsewhere"`` (or
  ``"late"``, the tick was over before this node could claim it);
* **lost**: this node won the tick but its check-in (heartbeat) stopped
  reaching the store before the job finished: ``"lost"`` (``cause``); the
  job was cancelled at the claim's deadline.

The tenure calls: ``tenure.Schedule(name, every=1.0)`` cuts store time into
ticks; ``schedule.fire_due(keeper, deliver)`` claims the tick due now by
admitting its run ``schedule.run_id(tick)`` (one admission wins, however many
nodes race), and awaits ``deliver(firing)`` under that run's lease, renewed by
the node's ``tenure.Keeper`` (the check-in). A tick nobody fired is reported
to the next winner (``firing.missed``), a misfire.

The scheduler nodes are simulated as three keepers, each with its own store
handle and worker id, in one program; the third reaches the store through a
fault layer (``tenure.testing.with_faults``) to show a lost claim. Tick runs
carry no scope (contract §14), so the check reads each tick's record by its
run id: every tick has one run, owned by the one node whose outcome was not
"elsewhere", and was delivered at most once.

Run: ``python examples/cron_tick.py [URL]`` (default: a SQLite file in a
temporary directory). Exits 1 if one of its checks fails.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import uuid
from collections import defaultdict

import tenure
import tenure.testing

EVERY = 1.0
HOSTS = ("host-a", "host-b", "host-c")
FAILURES: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"    [{'ok' if condition else 'FAILED'}] {what}")
    if not condition:
        FAILURES.append(what)


class Node:
    """One scheduler process: its store handle, its keeper, its job."""

    def __init__(self, host: str, keeper: tenure.Keeper, log: "Log") -> None:
        self.host, self.keeper, self.log = host, keeper, log
        self.fail_next = False  # the next job this node runs raises
        self.job_time = 0.05

    async def deliver(self, firing) -> None:
        """The scheduled job, run under the tick's lease and fence."""
        start = firing.tick.start
        self.log.started[start].append(self.host)
        for missed in firing.missed:
            print(f"    {self.host}: misfire: nobody fired the tick of {missed.start:%H:%M:%S}")
            self.log.missed.append(missed.start)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the mail server refused the digest")
        await asyncio.sleep(self.job_time)  # cancelled at once if the claim is lost
        self.log.delivered[start].append(self.host)

    async def fire(self, schedule: tenure.Schedule, delay: float = 0.0):
        await asyncio.sleep(delay)
        return self.host, await schedule.fire_due(self.keeper, self.deliver)


class Log:
    def __init__(self) -> None:
        self.started: dict = defaultdict(list)
        self.delivered: dict = defaultdict(list)
        self.missed: list = []
        self.outcomes: dict = defaultdict(dict)  # tick start -> host -> TickOutcome


async def until_next_tick(store: tenure.Store, schedule: tenure.Schedule) -> None:
    """Sleeps until the next tick begins by the store's clock."""
    now = await store.now()
    await asyncio.sleep((schedule.tick_at(now).end - now).total_seconds() + 0.02)


async def fire_all(nodes, schedule, log, delays=None) -> None:
    delays = delays or [0.0] * len(nodes)
    for host, outcome in await asyncio.gather(*(n.fire(schedule, d) for n, d in zip(nodes, delays))):
        log.outcomes[outcome.tick.start][host] = outcome


async def main(url: str) -> int:
    tag = uuid.uuid4().hex[:6]
    # How many earlier ticks each firing checks for missed ones.
    schedule = tenure.Schedule(f"digest-{tag}", every=EVERY, lookback=5)
    observer = await tenure.connect(url)
    print(f"store {observer.url}, schedule {schedule.name} every {EVERY} s")
    log = Log()
    faulty = tenure.testing.with_faults(await tenure.connect(url))
    stores = [await tenure.connect(url), await tenure.connect(url), faulty.store]
    keepers = [
        tenure.Keeper(stores[0], ttl=2.0, worker_id="host-a"),
        tenure.Keeper(stores[1], ttl=2.0, worker_id="host-b"),
        tenure.Keeper(stores[2], ttl=0.6, worker_id="host-c"),
    ]
    a, b, c = nodes = [Node(h, k, log) for h, k in zip(HOSTS, keepers)]
    try:
        print("1. three nodes fire every tick; the second tick's job raises wherever it runs")
        await until_next_tick(observer, schedule)
        for n in range(3):
            for node in nodes:
                node.fail_next = n == 1
            await fire_all(nodes, schedule, log)
            await until_next_tick(observer, schedule)
        for node in nodes:
            node.fail_next = False

        print("2. host-c wins a tick, then its check-ins hang: the claim is lost mid-job")
        faulty.inject("renew_many", "hang")
        faulty.inject("renew", "hang")
        c.job_time = 3.0  # longer than host-c's ttl
        await fire_all(nodes, schedule, log, delays=[0.3, 0.3, 0.0])
        faulty.heal()
        c.job_time = 0.05

        print("3. nobody fires the next tick; the one after reports the misfire")
        await until_next_tick(observer, schedule)
        await until_next_tick(observer, schedule)
        await fire_all(nodes[:2], schedule, log)
    finally:
        for keeper in keepers:
            await keeper.shutdown(5)

    print()
    print(f"    {'tick':8}  {'host-a':16} {'host-b':16} {'host-c':16} store record of the tick")
    for start in sorted(log.outcomes):
        outcomes = log.outcomes[start]
        cells = []
        for host in HOSTS:
            outcome = outcomes.get(host)
            text = "-" if outcome is None else outcome.outcome
            if outcome is not None and outcome.cause:
                text += f"({outcome.cause})"
            cells.append(f"{text:16}")
        record = await observer.get(schedule.run_id(tenure.Tick(start, start)))
        stored = "none" if record is None else (
            f"{record.owner} {record.status.value} fence {record.fence}"
            + (f" error={record.error!r}" if record.error else ""))
        print(f"    {start:%H:%M:%S}  {' '.join(cells)} {stored}")
    print()

    winners_by_tick = {}
    for start, outcomes in log.outcomes.items():
        winners = [h for h, o in outcomes.items() if o.outcome in ("delivered", "delivery_failed", "lost")]
        others = {o.outcome for h, o in outcomes.items() if h not in winners}
        winners_by_tick[start] = winners
        check(len(winners) == 1 and others <= {"elsewhere", "late"},
              f"tick {start:%H:%M:%S}: one node won ({winners}), the others answered elsewhere/late")
        check(len(log.started[start]) <= 1 and len(log.delivered[start]) <= 1,
              f"tick {start:%H:%M:%S}: the job started {len(log.started[start])}x, "
              f"delivered {len(log.delivered[start])}x (at most once)")
        record = await observer.get(schedule.run_id(tenure.Tick(start, start)))
        won = outcomes[winners[0]] if len(winners) == 1 else None
        if won is not None and won.outcome == "lost":
            # The lapsed claim is finalised by a peer's reconciler (released,
            # not re-delivered: schedule ticks are released silently).
            check(record is not None and record.fence > won.fence and not record.is_active
                  and (record.error or "").startswith("released"),
                  f"tick {start:%H:%M:%S}: the lost claim's run was released by a peer, not re-run")
        else:
            check(record is not None and won is not None and record.owner == winners[0]
                  and record.fence == won.fence,
                  f"tick {start:%H:%M:%S}: the store's run {schedule.run_id(tenure.Tick(start, start))} "
                  f"is the winner's (owner and fence)")
    kinds = sorted(o.outcome for outcomes in log.outcomes.values() for o in outcomes.values())
    check("delivery_failed" in kinds, "a job that raised was answered delivery_failed")
    lost = [o for o in log.outcomes.values() for h, o in o.items() if o.outcome == "lost"]
    check(len(lost) == 1 and lost[0].cause == "deadline_passed" and not lost[0].delivered,
          "host-c's claim was lost at its deadline, the job not delivered")
    failed = [await observer.get(schedule.run_id(tenure.Tick(s, s))) for s in log.outcomes]
    failed = [r for r in failed if r is not None and r.status is tenure.Status.FAILED
              and (r.error or "").endswith("the mail server refused the digest")]
    check(len(failed) == 1, "the failed job's tick is kept as a failed run with its error")
    check(len(log.missed) == 1, "the tick nobody fired was reported once, as missed")

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        URL = sys.argv[1]
    else:
        URL = "sqlite://" + os.path.join(tempfile.mkdtemp(prefix="tenure-cron-"), "cron.db")
    sys.exit(asyncio.run(main(URL)))
