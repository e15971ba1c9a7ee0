"""``tenure.Keeper``: the native keeper plus what belongs to the event loop
it serves (the loop's pulse, ``async with``, the two forms of ``admit``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Awaitable, Callable, Generator, Iterable, Mapping, Optional, Union

from . import _tenure
from ._errors import NotAdmitted
from ._types import Admitted, RateLimit

__all__ = ["Keeper", "Admission"]

Seconds = Union[float, int, timedelta]


class Admission:
    """What ``keeper.admit(...)`` answers: await it for the outcome
    (``Admitted`` / ``Conflict`` / ``RateLimited`` / ``AlreadyExists``), or use it with
    ``async with`` to run the body under the admitted run's lease (raising
    :class:`tenure.NotAdmitted` when it was not admitted)."""

    def __init__(self, pending: Any) -> None:
        self._pending = pending
        self._run: Any = None

    def __await__(self) -> Generator[Any, None, Any]:
        return self._pending.__await__()

    async def __aenter__(self) -> Any:
        outcome = await self._pending
        if not isinstance(outcome, Admitted):
            raise NotAdmitted(outcome)
        self._run = outcome.run
        return await self._run.__aenter__()

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool:
        return bool(await self._run.__aexit__(exc_type, exc, traceback))


class Keeper(_tenure.Keeper):
    """Holds a worker's leases and keeps them alive (contract §12).

    Create it inside the event loop it serves::

        async with tenure.Keeper(store, ttl=30, grace=2) as keeper:
            async with keeper.admit("report-2026-12-06", scopes=["cron:report"]) as run:
                ...  # cancelled at once if the lease is lost

    Renewals run on Rust threads, beside the loop. The loop pulses the
    keeper; when it has not for ``loop_stall_limit`` seconds (default: the
    ttl; ``None``: never), every lease held from it and not yet settled is
    given up, so a stuck body cannot keep a lease alive. Leaving
    ``async with`` shuts the keeper down."""

    def __init__(  # the native __new__ reads the options; this mirrors them for type checkers
        self,
        store: Any,
        *,
        ttl: Optional[Seconds] = None,
        single_worker: bool = False,
        grace: Optional[Seconds] = None,
        renew_interval: Optional[Seconds] = None,
        store_timeout: Optional[Seconds] = None,
        worker_id: Optional[str] = None,
        reconcile: str = "fail",
        orphan_error: Optional[str] = None,
        recover_kinds: Optional[Iterable[str]] = None,
        release_kinds: Optional[Iterable[str]] = None,
        release_unlisted: bool = False,
        reconcile_interval: Optional[Seconds] = None,
        auto_reconcile: bool = True,
        on_recovered: Optional[Callable[[Any], Awaitable[None]]] = None,
        loop_stall_limit: Optional[Seconds] = ...,  # type: ignore[assignment]
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._pulse_handle: Optional[asyncio.TimerHandle] = None
        if self._pulse_period is not None:
            self._beat()

    def _beat(self) -> None:
        self._pulse()
        self._pulse_handle = self._loop.call_later(self._pulse_period, self._beat)

    def admit(  # type: ignore[override]
        self,
        id: str,  # noqa: A002 (the record's own field name)
        *,
        scopes: Any = None,
        kind: Optional[str] = None,
        strategy: str = "reject",
        metadata: Any = None,
        rate_limit: Optional[RateLimit] = None,
        counted_scopes: Optional[Mapping[str, int]] = None,
    ) -> Admission:
        """Admits run ``id`` under this keeper's worker id, ttl and grace;
        with ``rate_limit`` only while it has a permit left (else the answer
        is ``RateLimited``). ``counted_scopes`` (scope → capacity) are
        scopes held in one of ``capacity`` slots each, as with
        ``Store.admit``."""
        return Admission(
            self._admit(
                id,
                scopes=scopes,
                kind=kind,
                strategy=strategy,
                metadata=metadata,
                rate_limit=rate_limit,
                counted_scopes=counted_scopes,
            )
        )

    async def shutdown(self, grace: Any = None) -> Any:  # type: ignore[override]
        """Stops the keeper (see ``ShutdownReport``). The loop keeps pulsing
        while running work drains, so draining is not taken for a stall."""
        try:
            return await super().shutdown(grace)
        finally:
            if self._pulse_handle is not None:
                self._pulse_handle.cancel()
                self._pulse_handle = None

    async def __aenter__(self) -> "Keeper":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool:
        await self.shutdown()
        return False
