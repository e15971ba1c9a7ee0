"""Rate limits from Python (contract §16): ``rate_limit=`` on
``Store.admit``, ``Keeper.admit`` and ``Store.claim_limited``, on every
backend."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import tenure
from tenure import Admitted, AlreadyExists, Claimed, Conflict, RateLimit, RateLimited

from .conftest import new_id

#: Long enough that no use stops counting while a test runs.
MINUTE = 60.0

#: Refused by the store's front, or before it when they cannot be read as a limit.
BAD_LIMITS = [
    RateLimit("", 1, 1.0),
    RateLimit("bad\0key", 1, 1.0),
    RateLimit("k", 0, 1.0),
    RateLimit("k", 1001, 1.0),
    RateLimit("k", -1, 1.0),
    RateLimit("k", 1, 0),
    RateLimit("k", 1, 0.0015),
    RateLimit("k", 1, -1.0),
    RateLimit("k", 1, float("nan")),
    RateLimit("k", 1, timedelta(days=367)),
    RateLimit("k", 1, "soon"),  # type: ignore[arg-type]
    "k:1/s",
]


def assert_rate_limited(answer, key, period=MINUTE):
    """``answer`` is RateLimited naming ``key``, a permit freeing within ``period``."""
    assert isinstance(answer, RateLimited), answer
    assert answer.key == key
    assert isinstance(answer.retry_after, float)
    assert 0 < answer.retry_after <= period


async def test_admit_uses_permits_then_answers_rate_limited(store):
    """The first ``permits`` admissions are admitted, the next answers
    RateLimited naming the key with a retry_after and stores nothing; the
    same key with other permits is another log."""
    key = new_id("key")
    limit = RateLimit(key, 2, MINUTE)
    for _ in range(2):
        admitted = await store.admit(new_id("run"), "worker-a", ttl=30, rate_limit=limit)
        assert isinstance(admitted, Admitted), admitted
    refused_id = new_id("run")
    refused = await store.admit(refused_id, "worker-a", ttl=30, rate_limit=limit)
    assert_rate_limited(refused, key)
    assert await store.get(refused_id) is None
    again = await store.admit(new_id("run"), "worker-b", ttl=30, rate_limit=limit)
    assert_rate_limited(again, key)
    assert again.retry_after <= refused.retry_after

    other_log = await store.admit(
        new_id("run"), "worker-a", ttl=30, rate_limit=RateLimit(key, 3, MINUTE)
    )
    assert isinstance(other_log, Admitted), other_log
    unlimited = await store.admit(new_id("run"), "worker-a", ttl=30)
    assert isinstance(unlimited, Admitted), unlimited


async def test_scopes_are_judged_before_the_limit(store):
    """A Conflict or AlreadyExists uses no permit, and a RateLimited
    admission interrupts nobody."""
    key, scope = new_id("key"), new_id("scope")
    limit = RateLimit(key, 1, MINUTE)
    holder = await store.admit(new_id("run"), "worker-a", scopes=[scope], ttl=30)
    assert isinstance(holder, Admitted), holder
    conflict = await store.admit(
        new_id("run"), "worker-b", scopes=[scope], ttl=30, rate_limit=limit
    )
    assert isinstance(conflict, Conflict), conflict
    exists = await store.admit(holder.record.id, "worker-b", ttl=30, rate_limit=limit)
    assert isinstance(exists, AlreadyExists), exists

    first = await store.admit(new_id("run"), "worker-b", ttl=30, rate_limit=limit)
    assert isinstance(first, Admitted), first
    # The holder's own worker may interrupt it: the scopes would admit this.
    interrupting = await store.admit(
        new_id("run"), "worker-a", scopes=[scope], ttl=30, strategy="interrupt", rate_limit=limit
    )
    assert_rate_limited(interrupting, key)
    assert (await store.get(holder.record.id)).status is tenure.Status.PENDING


async def test_a_permit_frees_after_retry_after(store):
    """Once ``retry_after`` has passed, the limit admits again; with
    ``wait_for`` the admission waits for it."""
    key = new_id("key")
    limit = RateLimit(key, 1, 0.2)
    assert isinstance(await store.admit(new_id("run"), "w", rate_limit=limit), Admitted)
    refused = await store.admit(new_id("run"), "w", rate_limit=limit)
    assert_rate_limited(refused, key, period=0.2)
    await asyncio.sleep(refused.retry_after + 0.05)
    assert isinstance(await store.admit(new_id("run"), "w", rate_limit=limit), Admitted)
    waited = await store.admit(new_id("run"), "w", rate_limit=limit, wait_for=10)
    assert isinstance(waited, Admitted), waited


async def test_keeper_admit_with_rate_limit(store):
    """``Keeper.admit`` takes ``rate_limit`` too: RateLimited when awaited,
    NotAdmitted carrying it with ``async with`` (the body never runs)."""
    key = new_id("key")
    limit = RateLimit(key, 1, MINUTE)
    async with tenure.Keeper(store, ttl=10, auto_reconcile=False) as keeper:
        admitted = await keeper.admit(new_id("run"), rate_limit=limit)
        assert isinstance(admitted, Admitted) and admitted.run is not None
        await admitted.run.complete()
        refused = await keeper.admit(new_id("run"), rate_limit=limit)
        assert_rate_limited(refused, key)
        ran = False
        with pytest.raises(tenure.NotAdmitted) as caught:
            async with keeper.admit(new_id("run"), rate_limit=limit):
                ran = True
        assert not ran
        assert_rate_limited(caught.value.outcome, key)
        assert keeper.held_count == 0


async def test_claim_limited_claims_at_most_the_permits(store):
    """claim_limited claims at most the permits left, best first, and says
    when the next permit frees while it held claimable jobs back."""
    queue, key = new_id("q"), new_id("key")
    limit = RateLimit(key, 2, MINUTE)
    jobs = [await store.enqueue(queue, {"n": n}, priority=n) for n in range(5)]

    first = await store.claim_limited(queue, "worker-a", 30, rate_limit=limit, limit=10)
    assert isinstance(first, Claimed)
    assert [each.job.id for each in first.jobs] == [jobs[4].id, jobs[3].id]
    assert all(each.claim.owner == "worker-a" for each in first.jobs)
    assert isinstance(first.retry_after, float) and 0 < first.retry_after <= MINUTE

    spent = await store.claim_limited(queue, "worker-b", 30, rate_limit=limit, limit=10)
    assert spent.jobs == []
    assert 0 < spent.retry_after <= first.retry_after

    rest = await store.claim_limited(queue, "worker-b", 30, limit=10)
    assert rest.retry_after is None
    assert {each.job.id for each in rest.jobs} == {job.id for job in jobs[:3]}


async def test_claim_limited_without_holding_back(store):
    """No retry_after when the limit held nothing back; a claim that finds
    nothing uses no permit; admissions and claims share one log."""
    queue, key = new_id("q"), new_id("key")
    limit = RateLimit(key, 2, MINUTE)
    assert await store.claim_limited(queue, "w", 30, rate_limit=limit) == Claimed([], None)

    for n in range(3):
        await store.enqueue(queue, n, requires=["gpu"] if n else None)
    one = await store.claim_limited(queue, "w", 30, rate_limit=limit)
    assert len(one.jobs) == 1 and one.retry_after is None
    assert isinstance(await store.admit(new_id("run"), "w", rate_limit=limit), Admitted)
    held_back = await store.claim_limited(
        queue, "w", 30, rate_limit=limit, limit=5, capabilities=["gpu"]
    )
    assert held_back.jobs == [] and held_back.retry_after > 0
    elsewhere = await store.claim_limited(
        queue, "w", 30, rate_limit=RateLimit(key, 5, MINUTE), limit=5, capabilities=["gpu"]
    )
    assert len(elsewhere.jobs) == 2 and elsewhere.retry_after is None


async def test_bad_rate_limits_raise(store):
    """A bad limit raises InvalidInputError naming ``rate_limit``, from
    admit, Keeper.admit and claim_limited alike, and changes nothing."""
    queue, run = new_id("q"), new_id("run")
    await store.enqueue(queue, 1)
    async with tenure.Keeper(store, ttl=10, auto_reconcile=False) as keeper:
        calls = {
            "admit": lambda limit: store.admit(run, "w", ttl=30, rate_limit=limit),
            "claim_limited": lambda limit: store.claim_limited(queue, "w", 30, rate_limit=limit),
            "Keeper.admit": lambda limit: keeper.admit(run, rate_limit=limit),
        }
        for bad in BAD_LIMITS:
            for name, call in calls.items():
                with pytest.raises(tenure.InvalidInputError) as caught:
                    await call(bad)
                assert caught.value.field == "rate_limit", (name, bad, caught.value)
    assert await store.get(run) is None
    assert len(await store.list_jobs(queue, state="queued")) == 1


async def test_claim_limited_meets_injected_faults(store):
    """``claim_limited`` is an operation of its own for ``tenure.testing``."""
    faulty = tenure.testing.with_faults(store)
    faulty.inject("claim_limited", "unavailable")
    with pytest.raises(tenure.UnavailableError):
        await faulty.store.claim_limited(new_id("q"), "w", 30, rate_limit=RateLimit("k", 1, 1.0))
    assert faulty.calls("claim_limited") == 1
    faulty.heal()
    assert await faulty.store.claim_limited(new_id("q"), "w", 30) == Claimed([])


async def test_a_whole_millisecond_period_in_float_seconds_is_accepted(store):
    """A period of whole milliseconds given as float seconds is accepted,
    whatever the float's error (``17280000.001`` is a few nanoseconds short
    as a float)."""
    limit = RateLimit(new_id("key"), 1, 17280000.001)
    admitted = await store.admit(new_id("run"), "worker-a", ttl=30, rate_limit=limit)
    assert isinstance(admitted, Admitted), admitted
