"""A workflow engine's task worker on tenure: a task stops the moment its
worker loses the lease on it, and another worker finishes it.

Ported: the lease logic of a workflow engine's activity worker (Temporal's
activity heartbeats and heartbeat timeout, the same shape as Hatchet's or
Windmill's worker leases):

* **task queue**: tasks are scheduled on a task queue and polled by workers.
  Here ``store.enqueue(queue, payload, id=...)`` schedules, and
  ``keeper.claim_jobs(queue)`` polls: each answer is a ``tenure.JobRun``, the
  claim (owner, attempt, fencing token) held by the worker's keeper.
* **heartbeats**: a running activity heartbeats; the worker's keeper renews
  every claim it holds each beat (``renew_jobs`` batches).
* **heartbeat timeout → cancellation**: when a worker cannot heartbeat
  (here: a fault layer, ``tenure.testing.with_faults``, makes its renewals
  hang), the activity must stop before the server hands the task to someone
  else. ``async with job_run:`` binds the claim to the task running the body:
  at the claim's confirmed deadline the keeper fail-stops it, the body sees
  ``CancelledError`` and the caller ``OwnershipLostError``.
* **retry on another worker**: the server times the attempt out and
  schedules attempt 2. Here ``store.reap()`` requeues the lapsed claim, and a
  second worker claims it under a new, greater fence and completes it.
* **stale completions are refused**: the first worker's late result must not
  land. Its writes to the task's output go through a fence gate
  (``store.check_fence(resource, fence)``), answered ``tenure.Stale`` once the
  second attempt wrote; its completion (``store.complete(claim)``) is
  ``tenure.Rejected``.

Run: ``python examples/job_worker.py [URL]`` (default: a SQLite file in a
temporary directory). Exits 1 if one of its checks fails.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import uuid

import tenure
import tenure.testing

TTL = 1.0  # seconds: the keepers renew every TTL / 3
FAILURES: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"    [{'ok' if condition else 'FAILED'}] {what}")
    if not condition:
        FAILURES.append(what)


class Activity:
    """The task's work: a few steps, each writing its output through the
    output's fence gate, as the activity's side effect would."""

    def __init__(self, store: tenure.Store, steps: int, step_time: float) -> None:
        self.store, self.steps, self.step_time = store, steps, step_time
        self.cancelled_inside: dict[str, bool] = {}

    async def __call__(self, worker: str, job_run: tenure.JobRun) -> None:
        output = f"output:{job_run.id}"
        try:
            for step in range(1, self.steps + 1):
                gate = await self.store.check_fence(output, job_run.fence)
                if isinstance(gate, tenure.Stale):
                    raise RuntimeError(f"output refused at step {step}: {gate}")
                print(f"    {worker}: {job_run.id} attempt {job_run.claim.attempt} "
                      f"step {step}/{self.steps} written under fence {job_run.fence}")
                await asyncio.sleep(self.step_time)
        except asyncio.CancelledError:
            self.cancelled_inside[f"{worker}/{job_run.id}"] = True
            print(f"    {worker}: {job_run.id} cancelled at step {step} (CancelledError inside)")
            raise


async def work(worker: str, keeper: tenure.Keeper, queue: str, activity: Activity,
               lost: dict) -> list[str]:
    """One poll of the worker loop: claim up to 2 tasks, run each under its claim."""
    done: list[str] = []

    async def run_one(job_run: tenure.JobRun) -> None:
        try:
            async with job_run:  # completed on return, failed on raise
                await activity(worker, job_run)
            done.append(job_run.id)
        except tenure.OwnershipLostError as error:
            lost[job_run.id] = (job_run.claim, error)
            print(f"    {worker}: {job_run.id}: OwnershipLostError(cause={error.cause!r})")

    claimed = await keeper.claim_jobs(queue, limit=2)
    await asyncio.gather(*(run_one(job_run) for job_run in claimed))
    return done


async def main(url: str) -> int:
    store = await tenure.connect(url)
    tag = uuid.uuid4().hex[:6]
    queue = f"activities-{tag}"
    print(f"store {store.url}, queue {queue}")
    # worker-1 reaches the store through a fault layer: its renewals can hang.
    faulty = tenure.testing.with_faults(store)
    activity = Activity(store, steps=6, step_time=0.4)  # ~2.4 s, beyond one ttl
    lost: dict = {}

    async with tenure.Keeper(faulty.store, ttl=TTL, worker_id="worker-1", auto_reconcile=False) as w1, \
            tenure.Keeper(store, ttl=TTL, worker_id="worker-2", auto_reconcile=False) as w2:
        print("1. worker-1 claims the first task; its heartbeats stop reaching the store")
        first = f"{tag}-task-1"
        await store.enqueue(queue, {"activity": "charge_card", "order": 1}, id=first)
        claimed = await w1.claim_jobs(queue, limit=1)
        check([job_run.id for job_run in claimed] == [first], "worker-1 claimed the first task")
        old_claim = claimed[0].claim
        print(f"    worker-1 holds {first}: attempt {old_claim.attempt}, fence {old_claim.fence}")
        faulty.inject("renew_jobs", "hang", first)
        faulty.inject("renew_job", "hang", first)
        for n in (2, 3):
            await store.enqueue(queue, {"activity": "send_receipt", "order": n}, id=f"{tag}-task-{n}")

        async def worker_1_runs_it() -> None:
            try:
                async with claimed[0] as job_run:
                    await activity("worker-1", job_run)
            except tenure.OwnershipLostError as error:
                lost[first] = (old_claim, error)
                print(f"    worker-1: {first}: OwnershipLostError(cause={error.cause!r})")

        stuck = asyncio.create_task(worker_1_runs_it())
        print("2. meanwhile worker-2 works the queue normally")
        done_2 = await work("worker-2", w2, queue, activity, lost)
        await asyncio.wait_for(stuck, timeout=4 * TTL)
        check(activity.cancelled_inside.get(f"worker-1/{first}", False),
              "worker-1's body saw CancelledError when its claim's deadline passed")
        check(first in lost and isinstance(lost[first][1], tenure.OwnershipLostError),
              "worker-1's async with raised OwnershipLostError")
        check(not w1.holds(first), "worker-1's keeper no longer holds the task")

        print("3. the reaper requeues the lapsed claim")
        requeued: list[str] = []
        for _ in range(int(4 * TTL / 0.1)):
            report = await store.reap()
            requeued += [job.id for job in report.requeued]
            if first in requeued:
                break
            await asyncio.sleep(0.1)
        print(f"    reap -> requeued {requeued}")
        check(first in requeued, "the reaper requeued the task once its claim lapsed")
        job = await store.get_job(first)
        check(job.state is tenure.JobState.QUEUED, "the task is queued again")

        print("4. worker-2 claims attempt 2 and completes it")
        done_2 += await work("worker-2", w2, queue, activity, lost)
        job = await store.get_job(first)
        print(f"    {first}: {job.state.value}, attempt {job.attempt}, owner {job.owner!r}, fence {job.fence}")
        check(job.state is tenure.JobState.COMPLETED and job.attempt == 2 and job.owner == "worker-2",
              "the task was completed by worker-2 on attempt 2")
        check(job.fence > old_claim.fence, "attempt 2 ran under a greater fence")

        print("5. worker-1's stale writes are refused")
        gate = await store.check_fence(f"output:{first}", old_claim.fence)
        print(f"    check_fence(output:{first}, {old_claim.fence}) -> {gate}")
        check(isinstance(gate, tenure.Stale), "the stale worker's fenced output write is Stale")
        settle = await store.complete(old_claim)
        print(f"    store.complete(worker-1's claim) -> {settle}")
        check(isinstance(settle, tenure.Rejected), "the stale worker's completion is Rejected")
        faulty.heal()  # the hanging renewals go on (and are answered Lost)

        counts = {c.queue: c for c in await store.count_jobs()}[queue]
        print(f"    queue {queue}: {counts.completed} completed, {counts.queued} queued, "
              f"{counts.claimed} claimed, {counts.dead_lettered} dead-lettered")
        check(counts.completed == 3 and counts.queued == counts.claimed == 0,
              "every task completed exactly once")
        check(sorted(done_2) == sorted([f"{tag}-task-{n}" for n in (1, 2, 3)]),
              "worker-2 completed all three tasks")

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        URL = sys.argv[1]
    else:
        URL = "sqlite://" + os.path.join(tempfile.mkdtemp(prefix="tenure-jobs-"), "jobs.db")
    sys.exit(asyncio.run(main(URL)))
