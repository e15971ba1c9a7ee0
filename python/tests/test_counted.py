"""Counted scopes (contract §17) and the queue's concurrency limit from
Python: ``counted_scopes=`` on ``Store.admit`` and ``Keeper.admit``,
``LeaseRecord.slots``, ``tenure.ConcurrencyLimit`` and
``Store.claim_within``, on every backend."""

from __future__ import annotations

import asyncio

import pytest

import tenure
from tenure import (
    Admitted,
    Applied,
    ClaimedJob,
    ConcurrencyLimit,
    Conflict,
    Full,
    JobState,
    Lost,
    Rejected,
    Renewed,
    RunningJob,
    Settled,
    Status,
    Taken,
)

from .conftest import new_id, wait_for

#: The kind of the slot leases a concurrency limit admits (the core's
#: ``SLOT_LEASE_KIND``).
SLOT_KIND = "concurrency_slot"

#: Refused before anything is stored, each naming the field ``capacities``.
BAD_CAPACITIES = [
    {"s": 0},
    {"s": 1001},
    {"s": -1},
    {"s": 2**40},
    {"s": 1.5},
    {"s": "3"},
    {"s": True},
    {"s": None},
    {1: 2},
    ["s"],
    "s",
]


async def admit_counted(store, scope, capacity, owner="worker-a", ttl=30.0, **kwargs):
    """Admits a fresh run holding one slot of ``scope``; answers the outcome."""
    return await store.admit(
        new_id("run"), owner, ttl=ttl, counted_scopes={scope: capacity}, **kwargs
    )


async def active_holders(store, scope):
    """The active records naming ``scope``."""
    return [record for record in await store.list_by_scope(scope) if record.is_active]


async def test_capacity_admits_up_to_n_then_conflict(store):
    """A counted scope of capacity 3 admits three holders, each in its own
    slot (lowest free first); the fourth is a Conflict naming the holder
    whose lease ends first, with its retry_after; an ended holder frees its
    slot alone, which the next admission takes."""
    scope = new_id("scope")
    ttls = [20.0, 5.0, 30.0]
    holders = []
    for slot, ttl in enumerate(ttls):
        outcome = await admit_counted(store, scope, 3, owner=f"worker-{slot}", ttl=ttl)
        assert isinstance(outcome, Admitted), outcome
        record = outcome.record
        assert record.scopes == frozenset({scope})
        assert record.slots == {scope: slot}
        assert record.slot(scope) == slot
        assert record.slot_resource(scope) == f"{scope}#{slot}"
        holders.append(record)
    assert len({record.fence for record in holders}) == 3

    refused_id = new_id("run")
    refused = await store.admit(
        refused_id, "worker-x", ttl=30, counted_scopes={scope: 3}
    )
    assert isinstance(refused, Conflict), refused
    assert refused.holder.id == holders[1].id
    assert refused.holder.slots == {scope: 1}
    assert isinstance(refused.retry_after, float) and 0 < refused.retry_after <= 5
    assert await store.get(refused_id) is None

    stored = await store.get(holders[2].id)
    assert stored.slots == {scope: 2} and stored.slot(scope) == 2
    assert {record.id for record in await active_holders(store, scope)} == {
        record.id for record in holders
    }

    ended = await store.transition(holders[0].claim(), "succeeded")
    assert isinstance(ended, Applied), ended
    assert (await store.get(holders[1].id)).status is Status.PENDING
    again = await admit_counted(store, scope, 3, owner="worker-x")
    assert isinstance(again, Admitted), again
    assert again.record.slots == {scope: 0}
    assert again.record.fence > max(record.fence for record in holders)
    assert isinstance(await admit_counted(store, scope, 3), Conflict)


async def test_slots_on_records(store):
    """``slots`` is empty for exclusive scopes only, whose ``slot`` is 0;
    ``slot`` is None for a scope the record does not name; counted scopes
    join ``scopes``; an exclusive holder of a scope is its slot 0; renewals
    and takeovers keep the slot."""
    plain, counted, other = new_id("scope"), new_id("scope"), new_id("scope")
    exclusive = await store.admit(new_id("run"), "worker-a", scopes=[plain], ttl=30)
    assert isinstance(exclusive, Admitted), exclusive
    assert exclusive.record.slots == {}
    assert exclusive.record.slot(plain) == 0
    assert exclusive.record.slot_resource(plain) == f"{plain}#0"
    assert exclusive.record.slot(other) is None
    assert exclusive.record.slot_resource(other) is None

    mixed = await store.admit(
        new_id("run"), "worker-a", scopes=[other], counted_scopes={counted: 2}, ttl=30
    )
    assert isinstance(mixed, Admitted), mixed
    assert mixed.record.scopes == frozenset({other, counted})
    assert mixed.record.slots == {counted: 0}
    assert mixed.record.slot(other) == 0 and mixed.record.slot(counted) == 0

    # The exclusive holder of `plain` holds its slot 0.
    second = await admit_counted(store, plain, 2, owner="worker-b")
    assert isinstance(second, Admitted), second
    assert second.record.slots == {plain: 1}
    assert isinstance(await admit_counted(store, plain, 2), Conflict)
    blocked = await store.admit(new_id("run"), "worker-c", scopes=[plain], ttl=30)
    assert isinstance(blocked, Conflict) and blocked.holder.id == exclusive.record.id

    # Renewed and taken over, a record keeps its slot.
    assert isinstance(await store.renew(second.record.claim(), 30), Renewed)
    assert (await store.get(second.record.id)).slots == {plain: 1}
    lapsing = await admit_counted(store, counted, 2, owner="worker-b", ttl=0.05)
    assert isinstance(lapsing, Admitted) and lapsing.record.slots == {counted: 1}

    async def taken():
        answer = await store.claim_for_takeover(lapsing.record.id, "worker-c", ttl=30)
        return answer if isinstance(answer, Taken) else None

    took = await wait_for(taken)
    assert took.record.owner == "worker-c"
    assert took.record.slots == {counted: 1}
    assert took.record.fence > lapsing.record.fence


async def test_interrupt_takes_an_interruptible_slot(store):
    """Under ``strategy="interrupt"`` a full counted scope gives the lowest
    slot whose holder the request may interrupt (its own worker's) to the
    new record; holders of the other slots are never touched."""
    scope = new_id("scope")
    own = await admit_counted(store, scope, 2, owner="worker-a")
    theirs = await admit_counted(store, scope, 2, owner="worker-b")
    assert isinstance(own, Admitted) and isinstance(theirs, Admitted)
    outcome = await admit_counted(store, scope, 2, owner="worker-a", strategy="interrupt")
    assert isinstance(outcome, Admitted), outcome
    assert outcome.record.slots == {scope: 0}
    assert [record.id for record in outcome.interrupted] == [own.record.id]
    assert (await store.get(own.record.id)).status is Status.INTERRUPTED
    assert (await store.get(theirs.record.id)).status is Status.PENDING
    refused = await admit_counted(store, scope, 2, owner="worker-c", strategy="interrupt")
    assert isinstance(refused, Conflict), refused


@pytest.mark.parametrize("capacity", [1, 3])
async def test_racing_admissions_admit_exactly_n(store, backend_spec, capacity):
    """N + 1 admissions racing for N free slots (each from its own
    connection where the backend has more than one) admit exactly N, each
    in a slot of its own; the last is a Conflict."""
    stores = [store]
    if backend_spec.shared:
        stores += [await backend_spec.connect() for _ in range(capacity)]
    else:
        stores *= capacity + 1
    for _ in range(3):
        scope = new_id("scope")
        outcomes = await asyncio.gather(
            *(
                each.admit(
                    new_id("run"), f"worker-{n}", ttl=30, counted_scopes={scope: capacity}
                )
                for n, each in enumerate(stores)
            )
        )
        admitted = [outcome for outcome in outcomes if isinstance(outcome, Admitted)]
        conflicts = [outcome for outcome in outcomes if isinstance(outcome, Conflict)]
        assert len(admitted) == capacity, outcomes
        assert len(conflicts) == 1, outcomes
        assert sorted(outcome.record.slot(scope) for outcome in admitted) == list(
            range(capacity)
        )
        assert len(await active_holders(store, scope)) == capacity


async def test_bad_capacities_raise(store):
    """A capacity out of bounds, not a whole number, or a ``counted_scopes``
    that is no mapping of names, raises InvalidInputError naming
    ``capacities``, from admit and Keeper.admit alike, and stores nothing."""
    run = new_id("run")
    async with tenure.Keeper(store, ttl=10, auto_reconcile=False) as keeper:
        calls = {
            "admit": lambda bad: store.admit(run, "w", ttl=30, counted_scopes=bad),
            "Keeper.admit": lambda bad: keeper.admit(run, counted_scopes=bad),
        }
        for bad in BAD_CAPACITIES:
            for name, call in calls.items():
                with pytest.raises(tenure.InvalidInputError) as caught:
                    await call(bad)
                assert caught.value.field == "capacities", (name, bad, caught.value)
        assert keeper.held_count == 0
    assert await store.get(run) is None


async def test_keeper_admit_with_counted_scopes(store):
    """``Keeper.admit`` takes ``counted_scopes`` too: the held run's record
    carries its slot, the full scope answers Conflict (NotAdmitted with
    ``async with``), and completing the run frees its slot."""
    scope = new_id("scope")
    async with tenure.Keeper(store, ttl=10, auto_reconcile=False) as keeper:
        first = await keeper.admit(new_id("run"), counted_scopes={scope: 2})
        assert isinstance(first, Admitted) and first.run is not None
        assert first.record.slots == {scope: 0}
        async with keeper.admit(new_id("run"), counted_scopes={scope: 2}) as run:
            held = await store.get(run.id)
            assert held.slots == {scope: 1}
            with pytest.raises(tenure.NotAdmitted) as caught:
                async with keeper.admit(new_id("run"), counted_scopes={scope: 2}):
                    pass
            assert isinstance(caught.value.outcome, Conflict)
        assert (await store.get(run.id)).status is Status.SUCCEEDED
        freed = await keeper.admit(new_id("run"), counted_scopes={scope: 2})
        assert isinstance(freed, Admitted) and freed.record.slots == {scope: 1}
        await first.run.complete()
        await freed.run.complete()


async def test_wait_for_a_slot(store):
    """With ``wait_for``, an admission to a full counted scope waits until
    a holder ends, then takes the slot it freed."""
    scope = new_id("scope")
    holders = [await admit_counted(store, scope, 2) for _ in range(2)]
    assert all(isinstance(holder, Admitted) for holder in holders)
    waiting = asyncio.ensure_future(admit_counted(store, scope, 2, wait_for=20))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await store.transition(holders[1].record.claim(), "succeeded")
    outcome = await asyncio.wait_for(waiting, 25)
    assert isinstance(outcome, Admitted), outcome
    assert outcome.record.slots == {scope: 1}


# The queue's concurrency limit.


async def claim_running(store, queue, limit, worker="worker-a", ttl=30.0) -> RunningJob:
    """``claim_within`` that must claim; answers the RunningJob."""
    answer = await store.claim_within(queue, worker, ttl, limit)
    assert isinstance(answer, RunningJob), answer
    return answer


async def test_concurrency_limit_runs_up_to_capacity(store):
    """Capacity 2 runs two jobs at once, each with a slot lease of its own;
    the third claim is Full (naming the slot that frees first, nothing
    claimed); completing a job frees its slot for the next claim; a claim
    that finds no job answers None and gives the slot back."""
    queue, key = new_id("q"), new_id("limit")
    limit = ConcurrencyLimit(key, 2)
    jobs = [await store.enqueue(queue, {"n": n}) for n in range(4)]

    first = await claim_running(store, queue, limit, "worker-a", ttl=30)
    second = await claim_running(store, queue, limit, "worker-b", ttl=20)
    for running, worker, slot in ((first, "worker-a", 0), (second, "worker-b", 1)):
        assert isinstance(running.job, ClaimedJob)
        assert running.job.claim.owner == worker
        assert running.job.job.state is JobState.CLAIMED
        assert running.slot.kind == SLOT_KIND
        assert running.slot.owner == worker
        assert running.slot.is_active
        assert running.slot.slots == {key: slot}
        assert running.slot_claim == running.slot.claim()
        assert running.job.job.id in repr(running)
    assert {first.job.job.id, second.job.job.id} == {jobs[0].id, jobs[1].id}

    full = await store.claim_within(queue, "worker-c", 30, limit)
    assert isinstance(full, Full), full
    assert full.holder.id == second.slot.id
    assert isinstance(full.retry_after, float) and 0 < full.retry_after <= 20
    assert len(await store.list_jobs(queue, state="queued")) == 2

    done = await first.complete()
    assert isinstance(done, Settled) and done.job.state is JobState.COMPLETED
    assert (await store.get(first.slot.id)).status is Status.SUCCEEDED
    third = await claim_running(store, queue, limit, "worker-c")
    assert third.slot.slots == {key: 0}
    assert isinstance(await store.claim_within(queue, "worker-d", 30, limit), Full)

    await second.complete()
    await third.complete()
    fourth = await claim_running(store, queue, limit, "worker-d")
    await fourth.complete()
    assert await store.list_jobs(queue, state="queued") == []

    slots_before = await store.list_by_scope(key)
    assert await store.claim_within(queue, "worker-e", 30, limit) is None
    assert await active_holders(store, key) == []
    given_back = [
        record
        for record in await store.list_by_scope(key)
        if record.id not in {each.id for each in slots_before}
    ]
    assert [(record.owner, record.status) for record in given_back] == [
        ("worker-e", Status.SUCCEEDED)
    ]


async def test_running_job_renew_fail_and_release(store):
    """A RunningJob renews slot and job together; ``fail`` settles the job
    and frees the slot; ``release`` frees the slot alone, once; it works
    with ``match``."""
    queue, key = new_id("q"), new_id("limit")
    limit = ConcurrencyLimit(key, 1)
    await store.enqueue(queue, {"n": 1})
    await store.enqueue(queue, {"n": 2}, max_attempts=1)

    running = await claim_running(store, queue, limit)
    match running:
        case RunningJob(ClaimedJob(job=job), slot=tenure.LeaseRecord(kind=kind)):
            assert job.queue == queue and kind == SLOT_KIND
        case _:
            pytest.fail(f"no match: {running!r}")
    slot_renewal, job_renewal = await running.renew(30)
    assert isinstance(job_renewal, Renewed) and isinstance(slot_renewal, Renewed)
    failed = await running.fail("boom", backoff=60)
    assert isinstance(failed, Settled), failed
    assert failed.job.state is JobState.QUEUED and failed.job.last_error == "boom"
    assert await active_holders(store, key) == []

    again = await claim_running(store, queue, limit)
    released = await again.release()
    assert isinstance(released, Applied) and released.record.status is Status.SUCCEEDED
    assert isinstance(await again.release(), Rejected)
    assert (await store.get_job(again.job.job.id)).state is JobState.CLAIMED
    slot_renewal, job_renewal = await again.renew(30)
    assert job_renewal is None, "a job whose slot is lost is not renewed"
    assert isinstance(slot_renewal, Lost) and slot_renewal.reason == "terminal"
    dead = await again.fail("fatal", dead_letter=True)
    assert isinstance(dead, Settled) and dead.job.state is JobState.DEAD_LETTERED


async def test_a_lapsed_slot_is_taken_over(store):
    """A worker that stops renewing its slot loses it: once its lease has
    lapsed, the next claim through the full limit takes the slot over (the
    old slot lease failed) rather than answering Full; the old worker's
    renewal then answers that its slot is lost."""
    queue, key = new_id("q"), new_id("limit")
    limit = ConcurrencyLimit(key, 1)
    for n in range(2):
        await store.enqueue(queue, n)
    stalled = await claim_running(store, queue, limit, "worker-a", ttl=0.05)

    async def taken_over():
        answer = await store.claim_within(queue, "worker-b", 30, limit)
        return answer if isinstance(answer, RunningJob) else None

    successor = await wait_for(taken_over)
    assert successor.slot.slots == {key: 0}
    assert successor.slot.id != stalled.slot.id
    old = await store.get(stalled.slot.id)
    assert old.status is Status.FAILED and old.error
    slot_renewal, job_renewal = await stalled.renew(30)
    assert isinstance(slot_renewal, Lost), slot_renewal
    assert job_renewal is None, "a job whose slot is lost is not renewed"
    assert isinstance(await stalled.release(), Rejected)
    await successor.complete()


async def test_racing_claims_within_a_limit(store, backend_spec):
    """Four workers racing through a limit of capacity 2, with jobs for
    all, run exactly two jobs; the others are Full."""
    queue, key = new_id("q"), new_id("limit")
    limit = ConcurrencyLimit(key, 2)
    for n in range(4):
        await store.enqueue(queue, n)
    stores = [store] * 4
    if backend_spec.shared:
        stores = [store] + [await backend_spec.connect() for _ in range(3)]
    answers = await asyncio.gather(
        *(each.claim_within(queue, f"worker-{n}", 30, limit) for n, each in enumerate(stores))
    )
    running = [answer for answer in answers if isinstance(answer, RunningJob)]
    assert len(running) == 2, answers
    assert sum(isinstance(answer, Full) for answer in answers) == 2, answers
    assert sorted(each.slot.slot(key) for each in running) == [0, 1]
    assert len({each.job.job.id for each in running}) == 2
    assert len(await store.list_jobs(queue, state="claimed")) == 2


async def test_bad_concurrency_limits_raise(store):
    """A bad limit raises InvalidInputError before anything is claimed: a
    capacity out of bounds names ``capacities``, a bad key ``scope``, what
    is no limit at all ``limit``."""
    queue = new_id("q")
    await store.enqueue(queue, 1)
    bad = {
        "capacities": [
            ConcurrencyLimit("k", 0),
            ConcurrencyLimit("k", 1001),
            ConcurrencyLimit("k", -1),
            ConcurrencyLimit("k", 2.5),  # type: ignore[arg-type]
        ],
        "scope": [ConcurrencyLimit("", 2), ConcurrencyLimit("bad\0key", 2)],
        "concurrency": ["k:2", None, ConcurrencyLimit(7, 2)],  # type: ignore[arg-type]
    }
    for field, limits in bad.items():
        for limit in limits:
            with pytest.raises(tenure.InvalidInputError) as caught:
                await store.claim_within(queue, "w", 30, limit)
            assert caught.value.field == field, (limit, caught.value)
    assert len(await store.list_jobs(queue, state="queued")) == 1
    assert await store.list_active() == []


async def test_a_failed_claim_gives_the_slot_back(store):
    """When the job claim fails after the slot was taken, the error is
    raised and the slot is given back."""
    queue, key = new_id("q"), new_id("limit")
    await store.enqueue(queue, 1)
    faulty = tenure.testing.with_faults(store)
    faulty.inject("claim", "unavailable")
    with pytest.raises(tenure.UnavailableError):
        await faulty.store.claim_within(queue, "w", 30, ConcurrencyLimit(key, 1))
    faulty.heal()
    assert await active_holders(store, key) == []
    assert len(await store.list_by_scope(key)) == 1
    running = await claim_running(faulty.store, queue, ConcurrencyLimit(key, 1))
    await running.complete()
