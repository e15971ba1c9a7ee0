"""The keeper from asyncio: ``async with keeper.admit(...) as run:``, the
cancellation of a body whose lease is lost, the stalled-loop watchdog,
cancel / reconcile / shutdown / job runs, interpreter shutdown with a live
keeper, and many concurrent tasks on one loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tenure
from tenure import Admitted, Conflict, OwnershipLostError, Status

from .conftest import new_id, wait_for


def keeper(store, **options) -> tenure.Keeper:
    """A keeper without background reconciling (tests drive it explicitly)."""
    options.setdefault("ttl", 10)
    options.setdefault("auto_reconcile", False)
    return tenure.Keeper(store, **options)


async def poll_takeover(store, id, claimer="rival", timeout=30.0, grace=0.0):
    """Polls claim_for_takeover (with ``grace``) until Taken; answers
    (Taken, monotonic time at which the answer was seen)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = await store.claim_for_takeover(id, claimer, ttl=5, grace=grace)
        if isinstance(answer, tenure.Taken):
            return answer, time.monotonic()
        assert time.monotonic() < deadline, f"never taken: {answer}"
        await asyncio.sleep(0.01)


# --- async with keeper.admit(...) ------------------------------------------


async def test_body_returns_then_succeeded(store):
    """A body that returns completes the run: status SUCCEEDED."""
    id, scope = new_id("run"), new_id("scope")
    async with keeper(store) as k:
        async with k.admit(id, scopes=[scope], metadata={"n": 1}) as run:
            assert isinstance(run, tenure.Run)
            assert run.id == id and isinstance(run.fence, int) and run.loss is None
            assert k.holds(id)
            await run.check()
        assert not k.holds(id)
    record = await store.get(id)
    assert record.status is Status.SUCCEEDED
    assert record.scopes == {scope}
    assert record.metadata == {"n": 1}
    assert record.owner == k.worker_id


async def test_run_reports_progress(store):
    """report_progress records the progress with a fenced renewal; others
    read it on the record, which keeps it once the run succeeded."""
    id = new_id("run")
    async with keeper(store) as k:
        async with k.admit(id) as run:
            await run.report_progress({"step": 1, "of": 2})
            assert (await store.get(id)).progress == {"step": 1, "of": 2}
            await run.report_progress({"step": 2, "of": 2})
    record = await store.get(id)
    assert record.status is Status.SUCCEEDED
    assert record.progress == {"step": 2, "of": 2}


async def test_body_raises_then_failed(store):
    """A body that raises fails the run with the error text, and the
    exception propagates unchanged."""
    id = new_id("run")
    async with keeper(store) as k:
        with pytest.raises(ValueError, match="bad input"):
            async with k.admit(id):
                raise ValueError("bad input")
    record = await store.get(id)
    assert record.status is Status.FAILED
    assert "ValueError" in record.error and "bad input" in record.error


async def test_awaited_admit_and_match(store):
    """``await keeper.admit(...)`` answers Admitted(run=...) or Conflict, for
    use with match; the run is completed explicitly."""
    scope = new_id("scope")
    async with keeper(store, worker_id="worker-a") as k:
        outcomes = [await k.admit(new_id("run"), scopes=[scope]) for _ in range(2)]
        seen = []
        for outcome in outcomes:
            match outcome:
                case Admitted(run=run) if run is not None:
                    seen.append("admitted")
                    admitted_run = run
                case Conflict(holder=holder):
                    seen.append(f"conflict:{holder.owner}")
        assert seen == ["admitted", "conflict:worker-a"]
        record = await admitted_run.complete()
        assert record.status is Status.SUCCEEDED


async def test_async_with_on_held_scope_raises_not_admitted(store):
    """``async with keeper.admit(...)`` on a held scope raises NotAdmitted
    whose outcome is the Conflict; the body never runs."""
    scope = new_id("scope")
    holder = await store.admit(new_id("run"), "elsewhere", scopes=[scope], ttl=30)
    ran = False
    async with keeper(store) as k:
        with pytest.raises(tenure.NotAdmitted) as caught:
            async with k.admit(new_id("run"), scopes=[scope]):
                ran = True
    assert not ran
    assert isinstance(caught.value.outcome, Conflict)
    assert caught.value.outcome.holder.id == holder.record.id


# --- loss cancels the body --------------------------------------------------


async def test_lost_lease_cancels_body_before_rival_gets_in(store):
    """KEY: when renewals stop answering, the body is cancelled at its lease
    deadline, before the store lets a rival take the run over; ``async
    with`` raises OwnershipLostError(cause="deadline_passed").

    The keeper's deadline is the send time of its last confirmed renewal
    plus the ttl, never later than the store's expiry; the rival takes over
    with a grace (as every taker over should: the keeper's reconciler uses
    the keeper's) that covers handing the cancellation to the event loop."""
    id = new_id("run")
    faulty = tenure.testing.with_faults(store)
    times = {}
    rival = None
    try:
        async with keeper(faulty.store, ttl=1.5) as k:
            with pytest.raises(OwnershipLostError) as caught:
                async with k.admit(id) as run:
                    faulty.inject("renew", "hang")
                    faulty.inject("renew_many", "hang")
                    rival = asyncio.create_task(poll_takeover(store, id, grace=0.25))
                    try:
                        await asyncio.sleep(30)
                    except asyncio.CancelledError:
                        times["cancelled"] = time.monotonic()
                        raise
            taken, times["taken"] = await asyncio.wait_for(rival, 60)
            assert caught.value.cause == "deadline_passed"
            assert caught.value.id == id
            assert run.loss == "deadline_passed"
    finally:
        faulty.heal()
        if rival is not None and not rival.done():
            rival.cancel()
    assert "cancelled" in times, "the body was never cancelled"
    assert times["cancelled"] < times["taken"]
    assert taken.record.owner == "rival"
    assert (await store.get(id)).owner == "rival"


async def test_stalled_event_loop_gives_the_lease_up(store):
    """PAUSED LOOP: a body that blocks the loop past loop_stall_limit (= ttl)
    loses its lease (a rival in another thread takes it over meanwhile);
    once the loop runs again run.check() and run.complete() raise
    OwnershipLostError("event_loop_stalled").

    The rival uses the same Store object from its own thread and loop (a
    Store is usable from any loop), so this runs on every backend."""
    id = new_id("run")
    taken_event = threading.Event()
    result = {}

    def rival_thread():
        async def rival():
            result["taken"], _ = await poll_takeover(store, id, timeout=30)
            taken_event.set()

        try:
            asyncio.run(rival())
        except BaseException as error:  # reported by the main thread
            result["error"] = error
            taken_event.set()

    thread = threading.Thread(target=rival_thread, daemon=True)
    errors = []
    async with keeper(store, ttl=1) as k:
        with pytest.raises(OwnershipLostError) as exited:
            async with k.admit(id) as run:
                thread.start()
                # Blocks the event loop (like time.sleep) until the rival is in.
                blocked_from = time.monotonic()
                assert taken_event.wait(30), "the rival never took the run over"
                blocked_for = time.monotonic() - blocked_from
                for call in (run.check, run.complete):
                    try:
                        await call()
                    except OwnershipLostError as error:
                        errors.append(error)
                loss = run.loss
    thread.join(30)
    assert "error" not in result, result.get("error")
    assert blocked_for >= 1.0
    assert [e.cause for e in errors] == ["event_loop_stalled", "event_loop_stalled"]
    assert loss == "event_loop_stalled"
    assert exited.value.cause == "event_loop_stalled"
    assert result["taken"].record.owner == "rival"
    assert (await store.get(id)).owner == "rival"


async def test_completed_work_is_not_given_up_for_a_stall(store):
    """A run completed inside its block, whose body then blocks the loop
    past the stall limit, stays completed: nothing is left to give up."""
    id = new_id("run")
    async with keeper(store, ttl=1) as k:
        async with k.admit(id) as run:
            await run.complete()
            time.sleep(2.5)  # the stimulus: the loop blocked past the limit
        assert run.loss is None
    assert (await store.get(id)).status is Status.SUCCEEDED


async def test_shutdown_drains_past_the_stall_limit(store):
    """Shutting down lets running work finish (grace 5 s) for longer than
    loop_stall_limit (= ttl, 1 s): the loop goes on pulsing, so draining is
    not taken for a stall and the run completes."""
    id = new_id("run")
    inside = asyncio.Event()

    async def body(k):
        async with k.admit(id):
            inside.set()
            await asyncio.sleep(2.5)

    async with keeper(store, ttl=1) as k:
        task = asyncio.create_task(body(k))
        await inside.wait()
        report = await k.shutdown(5)
        await task
    assert report.drained
    assert (await store.get(id)).status is Status.SUCCEEDED


async def test_the_callers_own_cancellation_goes_on(store):
    """A body cancelled by its caller (not by a loss) ends in CancelledError,
    and the run is written failed, stop reason "cancelled"."""
    id = new_id("run")
    inside = asyncio.Event()

    async def body(k):
        async with k.admit(id):
            inside.set()
            await asyncio.sleep(30)

    async with keeper(store) as k:
        task = asyncio.create_task(body(k))
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    record = await store.get(id)
    assert record.status is Status.FAILED
    assert record.stop_reason == "cancelled"


# --- cancel, reconcile, shutdown, job runs ---------------------------------


async def test_cancel_answers(store):
    """keeper.cancel stops a local run (its body ends with OwnershipLostError
    cause "cancelled", the record is failed); other ids answer
    lease_valid_elsewhere / not_cancellable."""
    id = new_id("run")
    started = asyncio.Event()
    async with keeper(store) as k:

        async def body():
            async with k.admit(id):
                started.set()
                await asyncio.sleep(30)

        task = asyncio.create_task(body())
        await asyncio.wait_for(started.wait(), 30)
        result = await k.cancel(id)
        assert result == tenure.CancelResult("cancelled")
        with pytest.raises(OwnershipLostError) as caught:
            await asyncio.wait_for(task, 30)
        assert caught.value.cause == "cancelled"
        record = await store.get(id)
        assert record.status is Status.FAILED and record.stop_reason == "cancelled"
        again = await k.cancel(id)
        assert again.outcome == "not_cancellable" and again.status is Status.FAILED

        foreign = await store.admit(new_id("run"), "elsewhere", ttl=30)
        elsewhere = await k.cancel(foreign.record.id)
        assert elsewhere.outcome == "lease_valid_elsewhere"
        assert 0 < elsewhere.retry_after <= 30.5
        assert (await k.cancel(new_id("nobody"))).outcome == "not_cancellable"


async def test_cancel_anywhere_answers(store):
    """cancel_anywhere: lease_valid_elsewhere for a live foreign run,
    cancelled_by_takeover (record failed) once its lease lapsed,
    cancelled for a local run, not_found for an unknown id."""
    async with keeper(store) as k:
        live = await store.admit(new_id("run"), "elsewhere", ttl=30)
        answer = await k.cancel_anywhere(live.record.id)
        assert answer.outcome == "lease_valid_elsewhere" and answer.retry_after > 0

        dead = await store.admit(new_id("run"), "dead-worker", ttl=0.05)

        async def taken_over():
            answer = await k.cancel_anywhere(dead.record.id)
            return answer if answer.outcome == "cancelled_by_takeover" else None

        answer = await wait_for(taken_over)
        assert answer.record.status is Status.FAILED
        assert (await store.get(dead.record.id)).status is Status.FAILED

        local = (await k.admit(new_id("run"))).run
        answer = await k.cancel_anywhere(local.id)
        assert answer.outcome == "cancelled"
        assert local.loss == "cancelled"

        assert (await k.cancel_anywhere(new_id("nobody"))).outcome == "not_found"


async def test_reconcile_adopts_orphan_and_callback_completes_it(store):
    """reconcile="adopt": reconcile_now takes over a dead owner's lapsed run
    and hands on_recovered a Recovered whose run the callback completes."""
    id = new_id("run")
    await store.admit(id, "dead-worker", ttl=0.05)
    await wait_for(lambda: _listed_expired(store, id))
    recovered = []

    async def on_recovered(item):
        recovered.append(item)
        assert isinstance(item, tenure.Recovered)
        if item.record.id == id:
            await item.run.complete()

    async with keeper(store, reconcile="adopt", on_recovered=on_recovered) as k:
        report = await asyncio.wait_for(k.reconcile_now(), 30)
        assert isinstance(report, tenure.ReconcileReport)
        assert id in report.recovered
        assert report.callback_failed == []
    mine = [item for item in recovered if item.record.id == id]
    assert len(mine) == 1 and mine[0].run is not None
    assert mine[0].record.owner == k.worker_id
    record = await store.get(id)
    assert record.status is Status.SUCCEEDED and record.owner == k.worker_id


async def _listed_expired(store, id) -> bool:
    return any(r.id == id for r in (await store.list_expired()).records)


async def test_shutdown_report(store):
    """shutdown answers a ShutdownReport naming the runs it had to stop; a
    body still running is cancelled (OwnershipLostError cause shutdown)."""
    id = new_id("run")
    started = asyncio.Event()
    k = keeper(store)

    async def body():
        async with k.admit(id):
            started.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(body())
    await asyncio.wait_for(started.wait(), 30)
    report = await k.shutdown(0.2)
    assert isinstance(report, tenure.ShutdownReport)
    assert report.stopped_runs == [id]
    assert report.drained is False
    with pytest.raises(OwnershipLostError) as caught:
        await asyncio.wait_for(task, 30)
    assert caught.value.cause == "shutdown"

    idle = keeper(store)
    report = await idle.shutdown(1)
    assert report.stopped_runs == [] and report.stopped_jobs == []


async def test_claim_jobs_job_run(store):
    """keeper.claim_jobs answers JobRuns; ``async with job_run:`` completes
    the job when the body returns, fails it when the body raises."""
    queue = new_id("q")
    ok = await store.enqueue(queue, {"n": 1}, priority=2)
    bad = await store.enqueue(queue, {"n": 2}, priority=1, max_attempts=3)
    async with keeper(store) as k:
        runs = await k.claim_jobs(queue, limit=2)
        assert [r.id for r in runs] == [ok.id, bad.id]
        first, second = runs
        assert isinstance(first, tenure.JobRun)
        assert first.job.payload == {"n": 1} and first.claim.owner == k.worker_id
        async with first as held:
            assert held is first
            await held.check()
        with pytest.raises(RuntimeError, match="job broke"):
            async with second:
                raise RuntimeError("job broke")
        assert await k.claim_jobs(new_id("empty")) == []
    assert (await store.get_job(ok.id)).state is tenure.JobState.COMPLETED
    failed = await store.get_job(bad.id)
    assert failed.state is tenure.JobState.QUEUED
    assert "job broke" in failed.last_error


# --- interpreter shutdown with a live keeper -------------------------------

SHUTDOWN_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    import tenure

    URL, MODE = sys.argv[1], sys.argv[2]

    async def main():
        store = await tenure.connect(URL)
        keeper = tenure.Keeper(store, ttl=5)
        outcome = await keeper.admit("forever")
        started = asyncio.Event()

        async def body():
            async with outcome.run:
                started.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(body())
        await started.wait()
        if MODE == "exit-in-coroutine":
            sys.exit(3)
        globals()["KEEP"] = (keeper, task, store)

    asyncio.run(main())
    if MODE == "exit-at-module":
        sys.exit(4)
    """
)

SHUTDOWN_MODES = {"return": 0, "exit-in-coroutine": 3, "exit-at-module": 4}


@pytest.mark.parametrize("mode", list(SHUTDOWN_MODES))
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_interpreter_exits_with_live_keeper(kind, mode, tmp_path):
    """A program that ends (returns from asyncio.run, or sys.exit in the
    coroutine or at module level) while a keeper holds a run whose body
    sleeps forever exits promptly with its own code and no crash. Three
    processes per case, run side by side."""
    processes = []
    for attempt in range(3):
        url = "memory:" if kind == "memory" else f"sqlite://{tmp_path / f'run{attempt}.db'}"
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", SHUTDOWN_SCRIPT, url, mode],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for process in processes:
        try:
            _, stderr = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
            pytest.fail(f"did not exit within 20 s; stderr:\n{stderr}")
        assert "Fatal Python error" not in stderr, stderr
        assert "panicked" not in stderr, stderr
        assert process.returncode == SHUTDOWN_MODES[mode], stderr


# --- concurrency -------------------------------------------------------------


async def test_two_hundred_concurrent_runs(store):
    """200 tasks on one loop each admit and complete their own run at once."""
    prefix = new_id("many")
    async with keeper(store) as k:

        async def one(n):
            async with k.admit(f"{prefix}-{n}", scopes=[f"{prefix}-scope-{n}"]) as run:
                await asyncio.sleep(0)
                return run.id

        ids = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(200))), 120)
    assert len(set(ids)) == 200
    statuses = await asyncio.gather(*(store.get(id) for id in ids))
    assert all(record.status is Status.SUCCEEDED for record in statuses)


async def test_store_calls_do_not_serialise(store):
    """While one store call hangs, another call on the same store answers."""
    faulty = tenure.testing.with_faults(store)
    faulty.inject("get", "hang", "slow")
    hung = asyncio.ensure_future(faulty.store.get("slow"))
    try:
        await wait_for(lambda: faulty.calls("get") >= 1)
        now = await asyncio.wait_for(faulty.store.now(), 5)
        assert now.tzinfo is not None
        assert await asyncio.wait_for(faulty.store.get(new_id("fast")), 5) is None
        assert not hung.done()
    finally:
        faulty.heal()
    assert await asyncio.wait_for(hung, 30) is None
