"""A multi-worker run manager on tenure: the ownership logic of an agent
server's run queue (LangGraph's API server, ``multitask_strategy``), ported.

What the source system does, and the tenure call that does it here:

* **create-or-reject** (``multitask_strategy="reject"``): creating a run on a
  thread that already has an active run is refused, and the HTTP API answers
  409. Here every run is admitted with the scope ``"thread:<id>"`` and
  ``strategy="reject"``: ``keeper.admit`` answers ``tenure.Conflict`` (nothing
  changed), whose ``holder`` is the active run and ``retry_after`` the seconds
  until its lease (plus grace) ends: the 409 body and its ``Retry-After``.
* **create-or-interrupt** (``multitask_strategy="interrupt"``): a new run on a
  busy thread interrupts the running one; its worker stops it. Here
  ``strategy="interrupt"`` marks the holder ``interrupted`` in the admission's
  own atomic step (``Admitted.interrupted`` lists it) and the holder's keeper
  cancels the run's body, which sees ``CancelledError`` inside
  ``async with run:`` and ``OwnershipLostError`` outside. The contract (§3)
  lets an admission interrupt only a holder of the same worker or one whose
  lease lapsed; a run another worker is heartbeating answers ``Conflict``, so
  the server routes the interrupt to that worker (the source system's cancel
  message), which stops it with ``keeper.cancel(run_id)``, and the admission
  is retried (2b). Checkpoint writes present ``run.fence`` to a fence gate
  (``store.check_fence``): once the new run has written, the old run's writes
  are answered ``tenure.Stale`` and dropped.
* **heartbeats**: a worker keeps "running" rows alive with periodic
  heartbeats. Here a ``tenure.Keeper`` per worker renews every lease it holds
  each beat (ttl / 3).
* **orphan recovery** (the server's sweep of runs whose worker died): a run
  whose worker stopped heartbeating is resumed elsewhere, or marked failed.
  Here a "crashed" worker is simulated by ``store.admit`` with a short ttl and
  never renewed; another worker's keeper scans with ``reconcile_now()`` and
  either adopts the orphan (``reconcile="adopt"``: ``on_recovered`` gets a held
  ``run`` under a new, greater fence and finishes it) or fails it
  (``reconcile="fail"``: the record is written ``failed``).

Run: ``python examples/run_manager.py [URL]`` (default: a SQLite file in a
temporary directory). Exits 1 if one of its checks fails.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import uuid

import tenure

TTL = 1.5  # seconds; the keeper renews every TTL / 3
FAILURES: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"    [{'ok' if condition else 'FAILED'}] {what}")
    if not condition:
        FAILURES.append(what)


def http_create_answer(outcome: object) -> tuple[int, dict]:
    """What the API's ``POST /threads/{id}/runs`` answers for an admission."""
    if isinstance(outcome, tenure.Admitted):
        return 200, {"run_id": outcome.record.id, "status": outcome.record.status.value}
    if isinstance(outcome, tenure.Conflict):
        retry = None if outcome.retry_after is None else max(1, round(outcome.retry_after))
        return 409, {"detail": f"thread busy with {outcome.holder.id}", "retry_after": retry}
    return 409, {"detail": f"run exists already: {outcome!r}"}


async def create_or_reject(store: tenure.Store, a: tenure.Keeper, b: tenure.Keeper, tag: str) -> None:
    print("1. create-or-reject on one thread")
    thread = f"thread:{tag}-t1"
    started, release = asyncio.Event(), asyncio.Event()

    async def run_on_a() -> None:
        async with a.admit(f"run-{tag}-1", scopes=[thread], kind="run") as run:
            await run.mark_running()
            print(f"    worker-a runs {run.id} (fence {run.fence})")
            started.set()
            await release.wait()

    task = asyncio.create_task(run_on_a())
    await started.wait()
    outcome = await b.admit(f"run-{tag}-2", scopes=[thread], kind="run", strategy="reject")
    status, body = http_create_answer(outcome)
    print(f"    POST run-{tag}-2 on {thread} -> {status} {body}")
    check(isinstance(outcome, tenure.Conflict) and outcome.holder.id == f"run-{tag}-1",
          "a second run on a busy thread is rejected (409), naming the holder")
    check(isinstance(outcome, tenure.Conflict) and outcome.retry_after is not None
          and 0 < outcome.retry_after <= TTL, "the 409 carries a retry_after within one ttl")
    release.set()
    await task
    record = await store.get(f"run-{tag}-1")
    check(record.status is tenure.Status.SUCCEEDED, "the first run finished: succeeded")
    async with b.admit(f"run-{tag}-2", scopes=[thread], kind="run") as run:
        print(f"    retried after the thread freed: worker-b runs {run.id} (fence {run.fence})")
    check((await store.get(f"run-{tag}-2")).status is tenure.Status.SUCCEEDED,
          "the retried run is admitted and succeeds")


class AgentRun:
    """One run's agent loop on a worker: a checkpoint per step, each written
    through the thread's fence gate, until the run is stopped."""

    def __init__(self, store: tenure.Store, keeper: tenure.Keeper, run_id: str, thread: str) -> None:
        self.store, self.keeper, self.run_id, self.thread = store, keeper, run_id, thread
        self.checkpoints = "checkpoints:" + thread  # the resource the runs write
        self.started = asyncio.Event()
        self.fence = 0
        self.cancelled_inside = False
        self.lost: tenure.OwnershipLostError | None = None
        self.writes = self.stale = 0
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        who = self.keeper.worker_id
        try:
            async with self.keeper.admit(self.run_id, scopes=[self.thread], kind="run") as run:
                await run.mark_running()
                self.fence = run.fence
                print(f"    {who} runs {run.id} (fence {run.fence})")
                self.started.set()
                step = 0
                try:
                    while True:
                        step += 1
                        gate = await self.store.check_fence(self.checkpoints, run.fence)
                        if isinstance(gate, tenure.Stale):
                            self.stale += 1  # refused: this checkpoint is never written
                        else:
                            self.writes += 1
                        await asyncio.sleep(0.05)
                except asyncio.CancelledError:
                    self.cancelled_inside = True
                    print(f"    {who}: body of {run.id} cancelled at step {step} (CancelledError inside)")
                    raise
        except tenure.OwnershipLostError as lost:
            self.lost = lost
            print(f"    {who}: async with run: raised OwnershipLostError(cause={lost.cause!r})")

    async def stopped(self, what: str) -> None:
        await asyncio.wait_for(self.task, timeout=3 * TTL)
        check(self.cancelled_inside, f"{what}: the body saw CancelledError")
        check(isinstance(self.lost, tenure.OwnershipLostError),
              f"{what}: async with run: raised OwnershipLostError")
        print(f"    {self.run_id} wrote {self.writes} checkpoints; {self.stale} later ones answered Stale")

    async def refused(self, what: str) -> None:
        """Once a newer run wrote, a checkpoint from this one is refused."""
        stale = await self.store.check_fence(self.checkpoints, self.fence)
        print(f"    a checkpoint {self.run_id} would write now: {stale}")
        check(isinstance(stale, tenure.Stale), f"{what}: the stopped run's fenced writes are refused")


async def create_or_interrupt(store: tenure.Store, a: tenure.Keeper, b: tenure.Keeper, tag: str) -> None:
    print("2a. create-or-interrupt, the new run created by the holder's own worker")
    thread = f"thread:{tag}-t2"
    old = AgentRun(store, a, f"run-{tag}-3", thread)
    await old.started.wait()
    await asyncio.sleep(0.2)
    outcome = await a.admit(f"run-{tag}-4", scopes=[thread], kind="run", strategy="interrupt")
    check(isinstance(outcome, tenure.Admitted), "the interrupting run is admitted at once")
    if not isinstance(outcome, tenure.Admitted):
        old.task.cancel()
        return
    interrupted = [record.id for record in outcome.interrupted]
    print(f"    POST run-{tag}-4 (interrupt) -> admitted (fence {outcome.record.fence}), "
          f"interrupted {interrupted} in the same atomic step")
    check(interrupted == [f"run-{tag}-3"], "the admission interrupted the running run")
    async with outcome.run as new_run:
        gate = await store.check_fence(old.checkpoints, new_run.fence)
        print(f"    {new_run.id} writes its first checkpoint: {gate}")
        check(isinstance(gate, tenure.Accepted), "the new run's checkpoint is accepted")
        await old.stopped("interrupted run")
        await old.refused("interrupted run")
    check((await store.get(old.run_id)).status is tenure.Status.INTERRUPTED,
          "the interrupted run is recorded interrupted")
    check((await store.get(f"run-{tag}-4")).status is tenure.Status.SUCCEEDED,
          "the interrupting run succeeded")

    # The contract (§3) lets an admission interrupt a holder only when it is
    # the requester's own, or its lease has lapsed: a run another worker is
    # heartbeating blocks it. The server then routes the interrupt to the
    # holder's worker (LangGraph: a cancel message on the run's control
    # channel), which stops the run with keeper.cancel; the admission retried
    # then goes through.
    print("2b. create-or-interrupt across workers")
    thread = f"thread:{tag}-t5"
    old = AgentRun(store, a, f"run-{tag}-8", thread)
    await old.started.wait()
    await asyncio.sleep(0.2)
    first = await b.admit(f"run-{tag}-9", scopes=[thread], kind="run", strategy="interrupt")
    print(f"    worker-b: POST run-{tag}-9 (interrupt) -> {type(first).__name__}"
          f" (holder {getattr(getattr(first, 'holder', None), 'owner', None)!r}, lease valid)")
    check(isinstance(first, tenure.Conflict) and first.holder.id == old.run_id,
          "interrupt does not override another worker's valid lease: Conflict")
    cancelled = await a.cancel(old.run_id)  # on worker-a, where the cancel message lands
    print(f"    worker-a: keeper.cancel({old.run_id!r}) -> {cancelled.outcome}")
    check(cancelled.outcome == "cancelled", "the holder's worker cancelled the run")
    await old.stopped("cancelled run")
    second = await b.admit(f"run-{tag}-9", scopes=[thread], kind="run", strategy="interrupt")
    check(isinstance(second, tenure.Admitted), "the retried interrupting admission is admitted")
    if isinstance(second, tenure.Admitted):
        async with second.run as new_run:
            gate = await store.check_fence(old.checkpoints, new_run.fence)
            print(f"    worker-b: {new_run.id} (fence {new_run.fence}) writes its checkpoint: {gate}")
            check(isinstance(gate, tenure.Accepted), "the new run's checkpoint is accepted")
            await old.refused("cancelled run")
    record = await store.get(old.run_id)
    print(f"    {old.run_id} is now {record.status.value} (stop reason {record.stop_reason!r})")
    check(not record.is_active, "the cancelled run is finished")


async def crash(store: tenure.Store, run_id: str, thread: str) -> None:
    """A worker admits a run, starts it, and dies: its lease is never renewed."""
    admitted = await store.admit(run_id, "worker-crashed", scopes=[thread], kind="run", ttl=0.4)
    assert isinstance(admitted, tenure.Admitted), admitted
    await store.transition(admitted.record.claim(), "running")
    print(f"    worker-crashed admitted {run_id} on {thread} (fence {admitted.record.fence}) and died")


async def orphans(store: tenure.Store, tag: str) -> None:
    print("3. orphan recovery")
    recovered_log: list[str] = []

    async def resume(recovered: tenure.Recovered) -> None:
        """The adopting worker's on_recovered: finish the orphan's work."""
        run = recovered.run
        async with run:  # renewed by this worker's keeper; succeeded on return
            print(f"    {recovered.record.owner} adopted {run.id}: {recovered.record.status.value} "
                  f"under fence {run.fence}; finishing its remaining steps")
            await asyncio.sleep(0.1)
        recovered_log.append(f"adopted {run.id}")

    async def failed(recovered: tenure.Recovered) -> None:
        recovered_log.append(f"failed {recovered.record.id}")
        print(f"    worker-c marked {recovered.record.id} {recovered.record.status.value}: "
              f"{recovered.record.error!r}")

    thread = f"thread:{tag}-t3"
    await crash(store, f"run-{tag}-5", thread)
    async with tenure.Keeper(store, ttl=TTL, worker_id="worker-d", reconcile="adopt",
                             auto_reconcile=False, on_recovered=resume) as adopter:
        blocked = await adopter.admit(f"run-{tag}-5b", scopes=[thread], kind="run")
        print(f"    POST on {thread} while the orphan's lease runs -> {http_create_answer(blocked)}")
        check(isinstance(blocked, tenure.Conflict), "the orphan holds its thread until its lease lapses")
        await asyncio.sleep(0.6)
        report = await adopter.reconcile_now()
        print(f"    reconcile (adopt): recovered={report.recovered} released={report.released}")
        check(report.recovered == [f"run-{tag}-5"], "the adopting keeper recovered the orphan")
    record = await store.get(f"run-{tag}-5")
    check(record.status is tenure.Status.SUCCEEDED and record.owner == "worker-d",
          "the adopted orphan was finished by its new owner: succeeded")

    await crash(store, f"run-{tag}-6", f"thread:{tag}-t4")
    async with tenure.Keeper(store, ttl=TTL, worker_id="worker-c", reconcile="fail",
                             orphan_error="worker died", auto_reconcile=False,
                             on_recovered=failed) as failer:
        await asyncio.sleep(0.6)
        report = await failer.reconcile_now()
        print(f"    reconcile (fail): recovered={report.recovered}")
        check(report.recovered == [f"run-{tag}-6"], "the failing keeper took the orphan")
    record = await store.get(f"run-{tag}-6")
    print(f"    run-{tag}-6 is now {record.status.value} ({record.error!r})")
    check(record.status is tenure.Status.FAILED, "the orphan is marked failed")
    check(recovered_log == [f"adopted run-{tag}-5", f"failed run-{tag}-6"],
          "on_recovered ran once per orphan")
    after = await store.admit(f"run-{tag}-7", "worker-b", scopes=[f"thread:{tag}-t4"], ttl=TTL)
    check(isinstance(after, tenure.Admitted), "the failed orphan's thread takes new runs")


async def main(url: str) -> int:
    store = await tenure.connect(url)
    tag = uuid.uuid4().hex[:6]  # fresh ids, so the example reruns on one store
    print(f"store {store.url}, run tag {tag}")
    async with tenure.Keeper(store, ttl=TTL, worker_id="worker-a", auto_reconcile=False) as a, \
            tenure.Keeper(store, ttl=TTL, worker_id="worker-b", auto_reconcile=False) as b:
        await create_or_reject(store, a, b, tag)
        await create_or_interrupt(store, a, b, tag)
    await orphans(store, tag)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        URL = sys.argv[1]
    else:
        URL = "sqlite://" + os.path.join(tempfile.mkdtemp(prefix="tenure-runs-"), "runs.db")
    sys.exit(asyncio.run(main(URL)))
