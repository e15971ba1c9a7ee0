"""tenure.Election (one leader at a time) and tenure.Schedule (each tick
fired once), with two keepers (two workers) on one store."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

import tenure

from .conftest import new_id, wait_for


def keeper(store, worker_id, **options) -> tenure.Keeper:
    options.setdefault("ttl", 3)
    options.setdefault("auto_reconcile", False)
    return tenure.Keeper(store, worker_id=worker_id, **options)


async def test_election_one_leader_then_handover(store):
    """Two workers campaign: exactly one leads (an int fence); its work
    awaits term.stepping_down(); shutting its election down answers a
    TermEnd, and the follower then takes over with a higher fence."""
    name = new_id("election")
    terms = {}
    stepped_down = {}

    def on_elected_for(worker):
        async def on_elected(term):
            terms[worker] = term
            await term.stepping_down()
            stepped_down[worker] = True

        return on_elected

    async with keeper(store, "worker-a") as a, keeper(store, "worker-b") as b:
        elections = {
            "worker-a": tenure.Election(a, name, on_elected_for("worker-a"), retry_interval=0.1),
            "worker-b": tenure.Election(b, name, on_elected_for("worker-b"), retry_interval=0.1),
        }
        try:
            await wait_for(lambda: len(terms) >= 1, timeout=30)
            leader = next(iter(terms))
            follower = "worker-b" if leader == "worker-a" else "worker-a"
            first = terms[leader]
            assert isinstance(first.fence, int)
            assert first.election == name and first.loss is None
            await first.check()
            assert elections[leader].leadership == tenure.Leadership(
                "leading", leader, first.fence
            )
            assert elections[leader].leadership.is_leading

            async def follows():
                seen = elections[follower].leadership
                return seen.state == "following" and seen.leader == leader

            await wait_for(follows, timeout=30)
            assert follower not in terms  # never two leaders

            end = await asyncio.wait_for(elections[leader].shutdown(2), 30)
            # The work returned once asked to step down.
            assert end == tenure.TermEnd("stepped_down")
            assert stepped_down.get(leader)
            assert elections[leader].leadership.state == "stopped"

            await wait_for(lambda: follower in terms, timeout=30)
            assert terms[follower].fence > first.fence
            assert elections[follower].leadership.is_leading
        finally:
            for election in elections.values():
                await asyncio.wait_for(election.shutdown(2), 30)


async def test_election_changed(store):
    """election.changed() answers the next Leadership (campaigning → leading)."""
    name = new_id("election")

    async def on_elected(term):
        await term.stepping_down()

    async with keeper(store, "worker-a") as a:
        election = tenure.Election(a, name, on_elected, retry_interval=0.1)
        try:

            async def leading():
                if election.leadership.is_leading:
                    return True
                seen = await asyncio.wait_for(election.changed(), 10)
                return seen.is_leading

            await wait_for(leading, timeout=30)
            assert election.name == name
        finally:
            end = await asyncio.wait_for(election.shutdown(2), 30)
        assert isinstance(end, tenure.TermEnd)


async def test_schedule_fires_each_tick_once(store):
    """Two workers fire the same due tick at once: one delivers, the other
    is told "elsewhere" (or "late" when the tick ended first)."""
    schedule = tenure.Schedule(new_id("schedule"), every=0.5, lookback=1)
    delivered = []

    async def deliver(firing):
        delivered.append(firing.tick)
        await firing.check()
        assert isinstance(firing.fence, int)

    async with keeper(store, "worker-a") as a, keeper(store, "worker-b") as b:
        for _ in range(5):  # a tick boundary may split the two; retry then
            outcomes = await asyncio.wait_for(
                asyncio.gather(schedule.fire_due(a, deliver), schedule.fire_due(b, deliver)), 30
            )
            # Same tick, and not one an earlier round of this loop delivered.
            if outcomes[0].tick == outcomes[1].tick and any(
                o.outcome == "delivered" for o in outcomes
            ):
                break
        assert outcomes[0].tick == outcomes[1].tick
        labels = sorted(o.outcome for o in outcomes)
        assert labels in (["delivered", "elsewhere"], ["delivered", "late"]), outcomes
        winner = next(o for o in outcomes if o.outcome == "delivered")
        assert winner.delivered and isinstance(winner.fence, int)
        assert isinstance(winner.tick, tenure.Tick) and winner.tick.end > winner.tick.start
        assert winner.tick in delivered
        assert schedule.run_id(winner.tick)


async def test_schedule_delivery_failure(store):
    """A delivery that raises answers "delivery_failed" with its error."""
    schedule = tenure.Schedule(new_id("schedule"), every=0.5, lookback=1)

    async def deliver(firing):
        raise RuntimeError("report generator broke")

    async with keeper(store, "worker-a") as a:
        outcome = None
        for _ in range(5):
            outcome = await asyncio.wait_for(schedule.fire_due(a, deliver), 30)
            if outcome.outcome != "late":
                break
        assert outcome.outcome == "delivery_failed", outcome
        assert "report generator broke" in outcome.error


def test_schedule_defaults():
    """tenure.Schedule("name", every=0.5) takes the Rust defaults (a lookback
    of at least one tick); a lookback out of range is refused."""
    schedule = tenure.Schedule(new_id("schedule"), every=0.5)
    assert schedule.name
    assert schedule.lookback >= 1
    assert tenure.Schedule(new_id("schedule"), every=0.5, lookback=3).lookback == 3
    with pytest.raises(tenure.InvalidInputError) as caught:
        tenure.Schedule(new_id("schedule"), every=0.5, lookback=0)
    assert caught.value.field == "lookback"


def test_schedule_cron_ticks_on_a_time_zones_wall_clocks():
    """tenure.Schedule.cron ticks at a cron expression's times in a time
    zone: 09:00 in Berlin is 08:00 UTC in December; 02:30 on the day New
    York skips 02:00-03:00 ticks at 03:00 EDT; bad input is refused."""
    digest = tenure.Schedule.cron(new_id("digest"), "0 9 * * MON-FRI", "Europe/Berlin")
    tick = digest.tick_at(datetime(2026, 12, 7, 10, 0, tzinfo=timezone.utc))
    assert tick.start == datetime(2026, 12, 7, 8, 0, tzinfo=timezone.utc)
    assert tick.end == datetime(2026, 12, 8, 8, 0, tzinfo=timezone.utc)
    assert digest.run_id(tick).endswith("@2026-12-07T08:00:00Z")

    nightly = tenure.Schedule.cron(new_id("nightly"), "30 2 * * *", "America/New_York", lookback=3)
    assert nightly.lookback == 3
    skipped = nightly.tick_at(datetime(2027, 3, 14, 12, 0, tzinfo=timezone.utc))
    assert skipped.start == datetime(2027, 3, 14, 7, 0, tzinfo=timezone.utc)

    for expression, zone, field in [
        ("every day", "UTC", "cron"),
        ("0 0 30 2 *", "UTC", "cron"),
        ("* * * * *", "Mars/Olympus", "time_zone"),
    ]:
        with pytest.raises(tenure.InvalidInputError) as caught:
            tenure.Schedule.cron(new_id("bad"), expression, zone)
        assert caught.value.field == field
