"""The lease store, from Python: every answer of every operation, on every
backend, as the typed dataclasses of ``tenure._types``."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

import tenure
from tenure import (
    Admitted,
    AlreadyExists,
    Applied,
    Conflict,
    Lost,
    NotTaken,
    Rejected,
    Renewed,
    Status,
    Taken,
)

from .conftest import new_id, wait_for


async def admit(store, id=None, owner="worker-a", ttl=30.0, **kwargs) -> Admitted:
    """Admits a fresh run and asserts it was admitted."""
    outcome = await store.admit(id or new_id("run"), owner, ttl=ttl, **kwargs)
    assert isinstance(outcome, Admitted), outcome
    return outcome


async def expired(store, id, owner="worker-a") -> Admitted:
    """A run admitted with a tiny lease, returned once the lease lapsed."""
    admitted = await admit(store, id, owner, ttl=0.05)
    await wait_for(lambda: _is_expired(store, id))
    return admitted


async def _is_expired(store, id) -> bool:
    scan = await store.list_expired()
    return any(record.id == id for record in scan.records)


async def test_admitted_fields(store):
    """Admitted carries the record as stored: typed fields, a pending status,
    an int fence, scopes as a frozenset and metadata as a dict."""
    id, scope = new_id("run"), new_id("scope")
    metadata = {"attempt": 1, "tags": ["a", "b"], "nested": {"x": None, "ok": True}}
    outcome = await store.admit(
        id, "worker-a", scopes=[scope, scope + "-2"], kind="report", ttl=30, metadata=metadata
    )
    assert isinstance(outcome, Admitted)
    record = outcome.record
    assert record.id == id
    assert record.owner == "worker-a"
    assert record.kind == "report"
    assert record.status is Status.PENDING
    assert record.is_active
    assert isinstance(record.fence, int) and record.fence >= 1
    assert isinstance(record.scopes, frozenset)
    assert record.scopes == {scope, scope + "-2"}
    assert record.metadata == metadata
    assert isinstance(record.created_at, datetime) and record.created_at.tzinfo is not None
    assert record.lease_expires_at > record.created_at
    assert record.error is None and record.stop_reason is None
    assert outcome.interrupted == []
    assert outcome.run is None
    assert record.claim() == tenure.Claim(id, "worker-a", record.fence)
    assert await store.get(id) == record


async def test_admit_with_wait_for_waits_for_the_holder(store):
    """``wait_for`` answers the holder's Conflict once it has passed, and
    admits a waiter as soon as the holder finishes (woken by the release
    notice, or by polling where the store announces none)."""
    scope = new_id("scope")
    holder = await admit(store, scopes=[scope])
    short = await store.admit(new_id("run"), "worker-b", scopes=[scope], ttl=30, wait_for=0.05)
    assert isinstance(short, Conflict), short
    assert short.holder.id == holder.record.id
    waiting = asyncio.ensure_future(
        store.admit(new_id("run"), "worker-b", scopes=[scope], ttl=30, wait_for=60)
    )
    assert isinstance(await store.transition(holder.record.claim(), "succeeded"), Applied)
    admitted = await waiting
    assert isinstance(admitted, Admitted), admitted
    assert admitted.record.owner == "worker-b"
    with pytest.raises(tenure.InvalidInputError):
        await store.admit(new_id("run"), "worker-b", scopes=[scope], wait_for=-1)


async def test_conflict_and_already_exists(store):
    """A held scope answers Conflict (holder, retry_after seconds); a taken
    id answers AlreadyExists; neither changes anything."""
    scope = new_id("scope")
    first = await admit(store, scopes=[scope])
    conflict = await store.admit(new_id("run"), "worker-b", scopes=[scope], ttl=30)
    assert isinstance(conflict, Conflict)
    assert conflict.holder.id == first.record.id
    assert conflict.holder.owner == "worker-a"
    assert isinstance(conflict.retry_after, float)
    assert 0 < conflict.retry_after <= 30.5

    again = await store.admit(first.record.id, "worker-b", ttl=30)
    assert again == AlreadyExists(first.record.id)
    assert await store.get(first.record.id) == first.record


async def test_interrupt_strategy(store):
    """With strategy="interrupt", the requester's own holder of the scope is
    interrupted and listed in Admitted.interrupted; its renewals are Lost."""
    scope = new_id("scope")
    first = await admit(store, scopes=[scope])
    second = await store.admit(
        new_id("run"), "worker-a", scopes=[scope], ttl=30, strategy="interrupt"
    )
    assert isinstance(second, Admitted)
    assert [record.id for record in second.interrupted] == [first.record.id]
    assert second.interrupted[0].status is Status.INTERRUPTED
    assert (await store.get(first.record.id)).status is Status.INTERRUPTED
    assert await store.renew(first.record.claim(), 30) == Lost("interrupted")
    taken = await store.claim_for_takeover(first.record.id, "rival", ttl=5)
    assert taken == NotTaken("interrupted")


async def test_interrupt_does_not_break_a_valid_foreign_lease(store):
    """Interrupt never takes a scope from another worker's valid lease."""
    scope = new_id("scope")
    await admit(store, scopes=[scope], owner="worker-a")
    outcome = await store.admit(
        new_id("run"), "worker-b", scopes=[scope], ttl=30, strategy="interrupt"
    )
    assert isinstance(outcome, Conflict)


async def test_renew_and_lost_reasons(store):
    """renew answers Renewed(expires_at), or Lost with the reason:
    owner_changed after a takeover, terminal (with status), missing."""
    held = await admit(store)
    renewed = await store.renew(held.record.claim(), 60)
    assert isinstance(renewed, Renewed)
    assert renewed.expires_at > held.record.lease_expires_at

    done = await admit(store)
    assert isinstance(await store.transition(done.record.claim(), "succeeded"), Applied)
    assert await store.renew(done.record.claim(), 30) == Lost("terminal", Status.SUCCEEDED)

    assert await store.renew(tenure.Claim(new_id("nobody"), "worker-a", 1), 30) == Lost("missing")

    id = new_id("run")
    orphan = await expired(store, id)
    assert isinstance(await store.claim_for_takeover(id, "rival", ttl=30), Taken)
    assert await store.renew(orphan.record.claim(), 30) == Lost("owner_changed")


async def test_renew_with_progress(store):
    """renew_with_progress renews and records progress in one fenced write;
    a stale claim's report is Lost and writes nothing; None is refused."""
    held = await admit(store)
    claim = held.record.claim()
    assert held.record.progress is None
    assert isinstance(await store.renew_with_progress(claim, 60, {"done": 3}), Renewed)
    assert (await store.get(claim.id)).progress == {"done": 3}
    with pytest.raises(tenure.InvalidInputError):
        await store.renew_with_progress(claim, 60, None)
    stale = tenure.Claim(claim.id, "someone-else", claim.fence)
    assert await store.renew_with_progress(stale, 60, "theirs") == Lost("owner_changed")
    assert (await store.get(claim.id)).progress == {"done": 3}


async def test_renew_many(store):
    """renew_many answers one Renewed/Lost per claim, in order."""
    a = await admit(store)
    b = await admit(store)
    missing = tenure.Claim(new_id("nobody"), "worker-a", 1)
    answers = await store.renew_many([a.record.claim(), missing, b.record.claim()], 30)
    assert len(answers) == 3
    assert isinstance(answers[0], Renewed)
    assert answers[1] == Lost("missing")
    assert isinstance(answers[2], Renewed)


async def test_transition_applied_and_rejected(store):
    """transition answers Applied with the new record, or Rejected:
    not_allowed (status + requested), terminal (status), stale, missing."""
    held = await admit(store)
    claim = held.record.claim()
    running = await store.transition(claim, Status.RUNNING)
    assert isinstance(running, Applied)
    assert running.record.status is Status.RUNNING

    assert await store.transition(claim, "running") == Rejected(
        "not_allowed", Status.RUNNING, Status.RUNNING
    )

    failed = await store.transition(claim, "failed", error="boom", stop_reason="cancelled")
    assert isinstance(failed, Applied)
    assert failed.record.status is Status.FAILED
    assert failed.record.error == "boom"
    assert failed.record.stop_reason == "cancelled"
    assert not failed.record.is_active

    assert await store.transition(claim, "succeeded") == Rejected("terminal", Status.FAILED)
    assert await store.transition(tenure.Claim(new_id("x"), "w", 1), "succeeded") == Rejected(
        "missing"
    )

    id = new_id("run")
    orphan = await expired(store, id)
    assert isinstance(await store.claim_for_takeover(id, "rival", ttl=30), Taken)
    assert await store.transition(orphan.record.claim(), "succeeded") == Rejected("stale")


async def test_claim_for_takeover(store):
    """claim_for_takeover: Taken (new owner, higher fence) once the lease
    lapsed; NotTaken lease_valid (retry_after), missing, terminal."""
    valid = await admit(store)
    refused = await store.claim_for_takeover(valid.record.id, "rival", ttl=5)
    assert isinstance(refused, NotTaken)
    assert refused.reason == "lease_valid"
    assert isinstance(refused.retry_after, float) and 0 < refused.retry_after <= 30.5

    assert await store.claim_for_takeover(new_id("nobody"), "rival", ttl=5) == NotTaken("missing")

    done = await admit(store)
    await store.transition(done.record.claim(), "succeeded")
    assert await store.claim_for_takeover(done.record.id, "rival", ttl=5) == NotTaken(
        "terminal", status=Status.SUCCEEDED
    )

    id = new_id("run")
    orphan = await expired(store, id)
    taken = await store.claim_for_takeover(id, "rival", ttl=30)
    assert isinstance(taken, Taken)
    assert taken.record.owner == "rival"
    assert taken.record.fence > orphan.record.fence
    assert taken.record.is_active

    id = new_id("run")
    await expired(store, id)
    failed = await store.claim_for_takeover(id, "reaper", fail="orphaned")
    assert isinstance(failed, Taken)
    assert failed.record.status is Status.FAILED
    assert failed.record.error == "orphaned"


async def test_list_expired(store):
    """list_expired lists lapsed active records only, as an ExpiredScan."""
    alive = await admit(store)
    id = new_id("run")
    await expired(store, id)
    scan = await store.list_expired()
    assert isinstance(scan, tenure.ExpiredScan)
    ids = {record.id for record in scan.records}
    assert id in ids
    assert alive.record.id not in ids
    assert scan.skipped == []
    assert len((await store.list_expired(limit=1)).records) == 1
    # a grace far in the future hides it
    assert id not in {r.id for r in (await store.list_expired(3600)).records}


async def test_reads(store):
    """get / list_by_scope / list_active / now."""
    scope = new_id("scope")
    held = await admit(store, scopes=[scope])
    assert await store.get(new_id("nobody")) is None
    assert await store.get(held.record.id) == held.record
    assert [r.id for r in await store.list_by_scope(scope)] == [held.record.id]
    assert await store.list_by_scope(new_id("empty")) == []
    assert held.record.id in {r.id for r in await store.list_active()}
    now = await store.now()
    assert isinstance(now, datetime) and now.tzinfo is not None
    assert abs((now - held.record.created_at).total_seconds()) < 300


async def test_purge(store):
    """count_purgeable counts terminal records older than the bound; purge
    deletes exactly those (active ones stay)."""
    active = await admit(store)
    done = await admit(store)
    await store.transition(done.record.claim(), "succeeded")
    assert await store.count_purgeable(3600) == 0
    assert await store.purge(3600) == 0

    async def countable():
        return await store.count_purgeable(0) >= 1

    await wait_for(countable)
    count = await store.count_purgeable(0)
    assert await store.purge(0) == count
    assert await store.get(done.record.id) is None
    assert await store.get(active.record.id) is not None


async def test_structural_pattern_matching(store):
    """Every outcome works with `match` (dataclass patterns)."""
    scope = new_id("scope")

    async def describe(outcome) -> str:
        match outcome:
            case Admitted(record=tenure.LeaseRecord(status=Status.PENDING, fence=fence)):
                return f"admitted:{type(fence).__name__}"
            case Conflict(holder=holder, retry_after=float()):
                return f"conflict:{holder.owner}"
            case AlreadyExists(id=id):
                return "exists"
            case Renewed(expires_at=datetime()):
                return "renewed"
            case Lost(reason="terminal", status=status):
                return f"lost:terminal:{status.value}"
            case Applied(record=record):
                return f"applied:{record.status.value}"
            case Rejected(reason=reason):
                return f"rejected:{reason}"
            case NotTaken(reason="lease_valid", retry_after=float()):
                return "not_taken:lease_valid"
            case Taken():
                return "taken"
            case _:
                return "other"

    first = await store.admit(new_id("run"), "worker-a", scopes=[scope], ttl=30)
    assert await describe(first) == "admitted:int"
    assert await describe(await store.admit(new_id("run"), "b", scopes=[scope], ttl=30)) == (
        "conflict:worker-a"
    )
    assert await describe(await store.admit(first.record.id, "b", ttl=30)) == "exists"
    claim = first.record.claim()
    assert await describe(await store.renew(claim, 30)) == "renewed"
    assert await describe(await store.claim_for_takeover(claim.id, "r", ttl=1)) == (
        "not_taken:lease_valid"
    )
    assert await describe(await store.transition(claim, "succeeded")) == "applied:succeeded"
    assert await describe(await store.transition(claim, "failed")) == "rejected:terminal"
    assert await describe(await store.renew(claim, 30)) == "lost:terminal:succeeded"


async def test_store_repr_and_url(store, backend):
    """A store shows its redacted URL."""
    assert "tenure.Store" in repr(store)
    assert isinstance(store.url, str)
    if backend == "sqlite":
        assert store.url.startswith("sqlite://")
