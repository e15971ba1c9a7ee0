"""The bridge between the Rust threads and asyncio: answers reach the loop
that asked, however many loops a program runs, one after another or side
by side, and a cancelled call leaves the store usable."""

from __future__ import annotations

import asyncio
import threading

import tenure

from .conftest import new_id, wait_for


def _in_thread(target) -> None:
    """Runs ``target`` in a thread of its own; re-raises what it raised."""
    failures = []

    def run() -> None:
        try:
            target()
        except BaseException as error:  # re-raised below, in the test
            failures.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the thread did not finish within 60 s"
    if failures:
        raise failures[0]


def test_one_loop_after_another(backend_spec):
    """200 event loops, one after another on one thread, each awaiting
    calls: every answer reaches its own loop (a new loop may reuse a closed
    one's memory; its answers must not go to the closed one). The in-memory
    store answers without leaving the thread; the others cross it."""
    asked = []

    def run() -> None:
        async def one(n: int) -> None:
            store = await backend_spec.connect()
            assert await store.get(new_id(f"none-{n}")) is None
            asked.append(await store.now())

        for n in range(200):
            asyncio.run(one(n))

    _in_thread(run)
    assert len(asked) == 200


async def test_loops_side_by_side(store):
    """One Store used at once from this loop and from another thread's:
    each loop gets its own answers."""
    ids = [new_id("side") for _ in range(50)]

    def other_loop() -> None:
        async def admit_all() -> None:
            for id in ids:
                answer = await store.admit(id, "other-loop", ttl=30)
                assert isinstance(answer, tenure.Admitted)

        asyncio.run(admit_all())

    here = [new_id("here") for _ in range(50)]
    other = asyncio.get_running_loop().run_in_executor(None, _in_thread, other_loop)
    for id in here:
        assert isinstance(await store.admit(id, "this-loop", ttl=30), tenure.Admitted)
    await asyncio.wait_for(other, 120)
    owners = {(await store.get(id)).owner for id in ids}
    assert owners == {"other-loop"}
    assert {(await store.get(id)).owner for id in here} == {"this-loop"}


async def test_a_cancelled_call_leaves_the_store_usable(store):
    """Cancelling the future of a call that hangs cancels it; the next calls
    answer as usual."""
    faulty = tenure.testing.with_faults(store)
    faulty.inject("get", "hang")
    hung = asyncio.ensure_future(faulty.store.get(new_id("hung")))
    await wait_for(lambda: faulty.calls("get") >= 1)
    hung.cancel()
    await asyncio.gather(hung, return_exceptions=True)
    assert hung.cancelled()
    faulty.heal()
    assert await asyncio.wait_for(faulty.store.get(new_id("after")), 30) is None
