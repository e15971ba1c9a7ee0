"""The job queue and the fence gates, from Python, on every backend."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import tenure
from tenure import (
    Accepted,
    ClaimedJob,
    GateRecord,
    JobClaim,
    JobState,
    Lost,
    NotRequeued,
    NotTakenBack,
    Rejected,
    Renewed,
    Requeued,
    Settled,
    Stale,
    TakenBack,
)

from .conftest import new_id, wait_for


async def claim_one(store, queue, worker="worker-a", ttl=30.0) -> ClaimedJob:
    """Claims exactly one job of ``queue``."""
    claimed = await store.claim(queue, worker, ttl)
    assert len(claimed) == 1, claimed
    return claimed[0]


async def test_enqueue_and_get_job(store):
    """enqueue answers the Job as stored; get_job reads it back."""
    queue = new_id("q")
    payload = {"invoice": 42, "lines": [1, 2.5, "x"], "flag": None}
    job = await store.enqueue(
        queue, payload, id=new_id("job"), max_attempts=4, priority=7, requires=["gpu"]
    )
    assert isinstance(job, tenure.Job)
    assert job.queue == queue
    assert job.payload == payload
    assert job.state is JobState.QUEUED
    assert job.priority == 7 and job.max_attempts == 4 and job.attempt == 0
    assert job.required_capabilities == frozenset({"gpu"})
    assert job.owner is None and job.claim() is None
    assert isinstance(job.run_at, datetime) and job.run_at.tzinfo is not None
    assert await store.get_job(job.id) == job
    assert await store.get_job(new_id("nobody")) is None
    generated = await store.enqueue(queue, "plain string")
    assert generated.id and generated.payload == "plain string"


async def test_claim_limit_priority_and_capabilities(store):
    """claim takes at most ``limit`` due jobs, highest priority first, only
    those whose required capabilities the worker has; none due → []."""
    queue = new_id("q")
    low = await store.enqueue(queue, 1, priority=1)
    high = await store.enqueue(queue, 2, priority=9)
    gpu = await store.enqueue(queue, 3, priority=100, requires=["gpu"])
    later = await store.enqueue(
        queue, 4, run_at=datetime.now().astimezone() + timedelta(hours=1)
    )

    first = await store.claim(queue, "worker-a", 30, limit=1)
    assert [c.job.id for c in first] == [high.id]
    rest = await store.claim(queue, "worker-a", 30, limit=10)
    assert [c.job.id for c in rest] == [low.id]
    assert await store.claim(queue, "worker-a", 30, limit=10) == []

    with_gpu = await store.claim(queue, "worker-b", 30, limit=10, capabilities=["gpu"])
    assert [c.job.id for c in with_gpu] == [gpu.id]

    claimed = first[0]
    assert claimed.job.state is JobState.CLAIMED
    assert claimed.claim == JobClaim(high.id, "worker-a", claimed.job.fence, 1)
    assert claimed.job.claim() == claimed.claim
    assert (await store.get_job(later.id)).state is JobState.QUEUED


async def test_renew_job_and_complete(store):
    """renew_job answers Renewed; complete Settled (completed); after that
    renew_job is Lost and a second complete Rejected."""
    queue = new_id("q")
    await store.enqueue(queue, {})
    claimed = await claim_one(store, queue)
    assert isinstance(await store.renew_job(claimed.claim, 60), Renewed)
    done = await store.complete(claimed.claim)
    assert isinstance(done, Settled)
    assert done.job.state is JobState.COMPLETED
    assert await store.renew_job(claimed.claim, 60) == Lost("completed")
    assert await store.complete(claimed.claim) == Rejected("completed")


async def test_renew_job_with_progress(store):
    """renew_job_with_progress records progress readable on the job."""
    queue = new_id("q")
    await store.enqueue(queue, {"n": 1})
    claimed = await claim_one(store, queue)
    assert claimed.job.progress is None
    renewed = await store.renew_job_with_progress(claimed.claim, 30, [1, "of", 4])
    assert isinstance(renewed, Renewed)
    assert (await store.get_job(claimed.job.id)).progress == [1, "of", 4]


async def test_enqueue_unique(store):
    """enqueue_unique creates a job while its key is free and answers
    Duplicate naming the holder while it is held; the key is per queue, the
    policy follows the job, and bad policies are refused before the store."""
    queue = new_id("q")
    first = await store.enqueue_unique(queue, {"n": 1}, key="user-7")
    assert isinstance(first, tenure.Created)
    assert first.job.unique_key == "user-7"
    assert first.job.unique_policy == "while_unfinished"
    assert first.job.unique_until is None
    assert await store.get_job(first.job.id) == first.job
    again = await store.enqueue_unique(queue, {"n": 2}, key="user-7", id=new_id("job"))
    assert again == tenure.Duplicate(first.job)
    elsewhere = await store.enqueue_unique(new_id("q"), {"n": 3}, key="user-7")
    assert isinstance(elsewhere, tenure.Created)

    period = await store.enqueue_unique(
        queue, {"n": 4}, key="daily", policy="for_period", period=3600
    )
    assert isinstance(period, tenure.Created)
    assert period.job.unique_policy == "for_period"
    assert period.job.unique_until - period.job.created_at == timedelta(hours=1)

    queued = await store.enqueue_unique(queue, {"n": 5}, key="q", policy="while_queued")
    claimed = await store.claim(queue, "worker-a", 30.0, limit=10)
    assert queued.job.id in {each.job.id for each in claimed}
    after_claim = await store.enqueue_unique(queue, {"n": 6}, key="q", policy="while_queued")
    assert isinstance(after_claim, tenure.Created)

    for policy, period in [("for_period", None), ("while_queued", 5), ("sometimes", None)]:
        try:
            await store.enqueue_unique(queue, 1, key="k", policy=policy, period=period)
        except ValueError as error:
            assert "period" in str(error) or "policy" in str(error)
        else:
            raise AssertionError(f"policy {policy!r} with period {period!r} was accepted")
    try:
        await store.enqueue_unique(queue, 1, key="")
    except tenure.InvalidInputError as error:
        assert error.field == "unique"
    else:
        raise AssertionError("an empty key was accepted")


async def test_complete_many(store):
    """complete_many answers one Settled/Rejected per claim, in order."""
    queue = new_id("q")
    for n in range(3):
        await store.enqueue(queue, n)
    claims = [c.claim for c in await store.claim(queue, "worker-a", 30, limit=3)]
    assert len(claims) == 3
    stale = JobClaim(claims[0].id, claims[0].owner, claims[0].fence + 100, claims[0].attempt)
    answers = await store.complete_many([claims[0], claims[1], claims[2]])
    assert all(isinstance(a, Settled) and a.job.state is JobState.COMPLETED for a in answers)
    again = await store.complete_many([claims[1], stale])
    assert all(isinstance(a, Rejected) for a in again), again


async def test_fail_retry_with_backoff_then_dead_letter(store):
    """fail with attempts left requeues (run_at pushed by backoff); the last
    attempt's failure dead-letters it (attempts_exhausted)."""
    queue = new_id("q")
    job = await store.enqueue(queue, {}, max_attempts=2)
    claimed = await claim_one(store, queue)
    retried = await store.fail(claimed.claim, "boom", backoff=3600)
    assert isinstance(retried, Settled)
    assert retried.job.state is JobState.QUEUED
    assert retried.job.last_error == "boom"
    assert retried.job.run_at - retried.job.updated_at >= timedelta(seconds=3500)
    assert await store.claim(queue, "worker-a", 30) == []  # not due yet

    job_id = job.id
    await store.enqueue(queue, {}, id=new_id("job"), max_attempts=2)  # a due one
    claimed = await claim_one(store, queue)
    assert claimed.job.id != job_id
    first = await store.fail(claimed.claim, "one", backoff=0)
    assert first.job.state is JobState.QUEUED
    claimed = await claim_one(store, queue)
    assert claimed.claim.attempt == 2
    dead = await store.fail(claimed.claim, "two", backoff=0)
    assert dead.job.state is JobState.DEAD_LETTERED
    assert dead.job.dead_reason == "attempts_exhausted"
    assert dead.job.last_error == "two"


async def test_fail_dead_letter_and_operator_retry(store):
    """fail(dead_letter=True) dead-letters at once; list_dead_letters lists
    it; retry_dead_letter answers Requeued, then NotRequeued."""
    queue = new_id("q")
    job = await store.enqueue(queue, {"x": 1}, max_attempts=5)
    claimed = await claim_one(store, queue)
    dead = await store.fail(claimed.claim, "poison", dead_letter=True)
    assert dead.job.state is JobState.DEAD_LETTERED
    assert dead.job.dead_reason == "failed"
    assert [j.id for j in await store.list_dead_letters(queue)] == [job.id]
    assert len(await store.list_dead_letters(queue, limit=1)) == 1

    requeued = await store.retry_dead_letter(job.id)
    assert isinstance(requeued, Requeued)
    assert requeued.job.state is JobState.QUEUED and requeued.job.attempt == 0
    assert await store.retry_dead_letter(job.id) == NotRequeued(
        "not_dead_lettered", JobState.QUEUED
    )
    assert await store.retry_dead_letter(new_id("nobody")) == NotRequeued("missing")
    assert await store.list_dead_letters(queue) == []


async def _reaped(store, grace=0.0):
    """Reaps until something was reaped (the claims' leases are tiny)."""
    reports = []

    async def reap():
        report = await store.reap(grace)
        reports.append(report)
        return report.requeued or report.dead_lettered

    await wait_for(reap)
    return reports[-1]


async def test_reap_and_take_back(store):
    """reap requeues an expired claim with attempts left and dead-letters one
    without (lease_expired); take_back reclaims the latter for its last
    worker (TakenBack), and refuses anything else (NotTakenBack)."""
    queue = new_id("q")
    retry = await store.enqueue(queue, "retry", max_attempts=3, priority=5)
    await claim_one(store, queue, ttl=0.05)
    report = await _reaped(store)
    assert [j.id for j in report.requeued] == [retry.id]
    assert report.requeued[0].state is JobState.QUEUED

    last = await store.enqueue(queue, "last", max_attempts=1, priority=10)
    reaped_claim = (await claim_one(store, queue, ttl=0.05)).claim
    assert reaped_claim.id == last.id
    report = await _reaped(store)
    assert [j.id for j in report.dead_lettered] == [last.id]
    assert report.dead_lettered[0].dead_reason == "lease_expired"

    taken = await store.take_back(reaped_claim, 30)
    assert isinstance(taken, TakenBack)
    assert taken.job.state is JobState.CLAIMED
    assert taken.claim.fence > reaped_claim.fence
    assert taken.job.taken_back == 1
    assert await store.take_back(reaped_claim, 30) == NotTakenBack(
        "not_dead_lettered", JobState.CLAIMED
    )
    assert await store.take_back(JobClaim(new_id("nobody"), "w", 1, 1), 30) == NotTakenBack(
        "missing"
    )

    # dead-lettered by its worker, not by the reaper: not taken back
    other = await store.enqueue(queue, "other", priority=20)
    claim = (await claim_one(store, queue)).claim
    assert claim.id == other.id
    await store.fail(claim, "x", dead_letter=True)
    assert await store.take_back(claim, 30) == NotTakenBack("not_by_reaper", dead_reason="failed")


async def test_counts_lists_and_purge(store):
    """count_jobs / list_jobs (with state filter, limit) / purge_jobs."""
    queue = new_id("q")
    for n in range(3):
        await store.enqueue(queue, n)
    claimed = await store.claim(queue, "worker-a", 30, limit=2)
    await store.complete(claimed[0].claim)

    counts = {c.queue: c for c in await store.count_jobs()}
    assert counts[queue] == tenure.QueueCounts(queue, 1, 1, 1, 0)
    assert len(await store.list_jobs(queue)) == 3
    assert len(await store.list_jobs(queue, limit=2)) == 2
    completed = await store.list_jobs(queue, state=JobState.COMPLETED)
    assert [j.id for j in completed] == [claimed[0].job.id]
    assert [j.id for j in await store.list_jobs(queue, "claimed")] == [claimed[1].job.id]

    assert await store.purge_jobs(3600) == 0

    async def purged():
        return await store.purge_jobs(0) == 1

    await wait_for(purged)
    assert await store.get_job(claimed[0].job.id) is None
    assert len(await store.list_jobs(queue)) == 2


async def test_fence_gates(store):
    """check_fence answers Accepted for the highest fence so far, Stale for a
    lower one; highest_fence reads it; purge_fences deletes unused gates."""
    resource = new_id("resource")
    assert await store.highest_fence(resource) is None
    assert await store.check_fence(resource, 5) == Accepted()
    assert await store.check_fence(resource, 5) == Accepted()
    assert await store.check_fence(resource, 3) == Stale(presented=3, highest_seen=5)
    assert await store.check_fence(resource, 8) == Accepted()
    assert await store.highest_fence(resource) == 8
    # Listed by resource (byte order), after a name: the gate and a
    # sibling, in order; a name sorts right after its own prefix.
    assert await store.check_fence(resource + "/b", 2) == Accepted()
    listed = await store.list_fences(after=resource[:-1], limit=2)
    assert [(gate.resource, gate.fence) for gate in listed] == [
        (resource, 8),
        (resource + "/b", 2),
    ]
    assert all(isinstance(gate, GateRecord) for gate in listed)
    assert all(isinstance(gate.checked_at, datetime) for gate in listed)
    page = await store.list_fences(after=resource, limit=1)
    assert [(gate.resource, gate.fence) for gate in page] == [(resource + "/b", 2)]
    with pytest.raises(tenure.InvalidInputError):
        await store.list_fences(limit=0)
    match await store.check_fence(resource, 1):
        case Stale(presented=1, highest_seen=8):
            pass
        case other:
            raise AssertionError(other)

    assert await store.purge_fences(3600) == 0

    async def purged():
        return await store.purge_fences(0) >= 1

    await wait_for(purged)
    assert await store.highest_fence(resource) is None
