"""``async with run:``: the body runs while its lease holds, and stops the
moment it does not.

Entering binds the lease to the task running the body: when the lease is
lost (a peer took it over, the store could not confirm it before its
deadline: then before any rival could be let in by the store), that task
is cancelled at once, in its own event loop. A lease given up because the
loop stalled past ``loop_stall_limit`` is cancelled when the loop runs
again. Leaving turns that cancellation into
:class:`tenure.OwnershipLostError` (as ``asyncio.timeout`` turns its own
into ``TimeoutError``), and settles the work: a body that returns completes
it (``succeeded``), a body that raises fails it, with fenced writes.

The native ``Run`` and ``JobRun`` call :func:`enter` and :func:`exit` from
their ``__aenter__`` and ``__aexit__``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional, Type

from ._errors import TenureError


async def enter(held: Any) -> Any:
    """Guards the current task with ``held``'s lease."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("async with run: needs a running asyncio task")
    held._watch(task)
    return held


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def exit(  # noqa: A001 (the protocol's own name)
    held: Any,
    exc_type: Optional[Type[BaseException]],
    exc: Optional[BaseException],
    _traceback: Any,
) -> bool:
    """Ends the guard: raises ``OwnershipLostError`` if the lease was lost,
    else settles the work by how the body ended."""
    watch = held._unwatch()
    cancelled = exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
    if watch == "lost" and cancelled:
        # The loss's cancel never reached the task: this cancellation is the
        # caller's own, and it goes on.
        return False
    if watch != "held":
        lost = held._lost_error()
        if watch == "lost_cancelled":
            task = asyncio.current_task()
            uncancel = getattr(task, "uncancel", None)
            # Another cancellation (the caller's own) still pending wins.
            if uncancel is not None and uncancel() > 0:
                return False
        raise lost from exc
    if held._settled:
        return False
    if exc_type is None:
        await held.complete()
        return False
    try:
        if hasattr(held, "mark_running"):
            if cancelled:
                await held.complete("failed", error="cancelled", stop_reason="cancelled")
            else:
                await held.complete("failed", error=_describe(exc) if exc else "failed")
        else:
            await held.fail(_describe(exc) if exc else "failed")
    except TenureError:
        # The body's own exception is the one to report; an unsettled lease
        # expires and the reconciler (or reaper) recovers it.
        pass
    return False
