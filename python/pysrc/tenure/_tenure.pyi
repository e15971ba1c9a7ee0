"""Type stubs of the native module ``tenure._tenure`` (built from the Rust
crate ``tenure-python``). Import these names from ``tenure``.

Durations are seconds (``float`` or ``int``) or ``datetime.timedelta``;
instants are timezone-aware ``datetime`` objects."""

from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Iterable, List, Mapping, Optional, Tuple, Union

from ._types import (
    Accepted,
    Admitted,
    AlreadyExists,
    Applied,
    CancelResult,
    Claim,
    Claimed,
    ClaimedJob,
    ConcurrencyLimit,
    Conflict,
    ExpiredScan,
    Full,
    Job,
    JobClaim,
    JobState,
    Leadership,
    LeaseRecord,
    Lost,
    NotRequeued,
    NotTaken,
    NotTakenBack,
    GateRecord,
    QueueCounts,
    RateLimit,
    RateLimited,
    ReapReport,
    ReconcileReport,
    Recovered,
    Rejected,
    Renewed,
    Requeued,
    Settled,
    Created,
    Duplicate,
    ShutdownReport,
    Stale,
    Status,
    Taken,
    TakenBack,
    TermEnd,
    Tick,
    TickOutcome,
)

Seconds = Union[float, int, timedelta]
Json = Any

__version__: str

def connect(
    url: str,
    *,
    schema: Optional[str] = None,
    namespace: Optional[str] = None,
    migrate: bool = True,
) -> Awaitable[Store]:
    """Opens the store ``url`` names: ``memory:``, ``sqlite:PATH``,
    ``postgres://...``, ``redis://...`` (and its Sentinel and Cluster forms),
    ``etcd://...``, ``mysql://...`` / ``mariadb://...``, with the defaults
    and refusals of the Rust ``tenure::connect``. ``schema`` (PostgreSQL)
    and ``namespace`` (Redis) win over the URL's parameters; with
    ``migrate=False`` the store's tables must exist already.

    Raises ``ConfigError`` (malformed URL, unknown scheme or parameter,
    refused server settings), ``UnavailableError``, ``IncompatibleError``."""

class Store:
    """An opened store: the lease store, the job queue and the fence gates.
    Every method answers an awaitable (an asyncio future; the call runs on
    Rust threads without the GIL); contention is an answer, an exception
    means the store could not say."""

    @property
    def url(self) -> str:
        """The store's URL, its password replaced by ``***``."""
    # Leases.
    def admit(
        self,
        id: str,
        owner: str,
        *,
        scopes: Optional[Iterable[str]] = None,
        kind: Optional[str] = None,
        ttl: Optional[Seconds] = None,
        strategy: str = "reject",
        metadata: Optional[Json] = None,
        grace: Optional[Seconds] = None,
        wait_for: Optional[Seconds] = None,
        rate_limit: Optional[RateLimit] = None,
        counted_scopes: Optional[Mapping[str, int]] = None,
    ) -> Awaitable[Union[Admitted, Conflict, RateLimited, AlreadyExists]]:
        """Admits run ``id`` for ``owner`` holding ``scopes``; ``strategy``
        ``"interrupt"`` interrupts the holders of the scopes instead of
        answering ``Conflict``. Without ``ttl`` the record has no lease.
        ``counted_scopes`` (scope → capacity, 1 to 1000) are scopes of
        ``capacity`` slots each, a semaphore (contract §17): the record
        holds the lowest free slot of each (``LeaseRecord.slots``), and
        when every slot is held the answer is ``Conflict`` naming the
        holder that frees first. They are added to ``scopes``; an
        exclusive scope of the same name is its slot 0. A capacity out of
        bounds raises ``InvalidInputError`` (``field`` ``"capacities"``).
        With ``rate_limit``, once the scopes admit it, it is admitted only
        while the limit has a permit left (using one), else answered
        ``RateLimited`` with nothing changed; a ``Conflict`` or
        ``AlreadyExists`` uses no permit.
        With ``wait_for`` (seconds) a held scope is waited for, in turn
        with this process's other waiters on this store, woken by the
        store's release notices (every client's on PostgreSQL, Redis and
        memory; those made through this ``Store`` elsewhere) or by polling
        (50 ms, or 1 s where every client's releases are announced), and a
        spent rate limit until its ``retry_after``; after ``wait_for`` the
        last ``Conflict`` or ``RateLimited`` is answered."""
    def renew(self, claim: Claim, ttl: Seconds) -> Awaitable[Union[Renewed, Lost]]:
        """Extends ``claim``'s lease to ``ttl`` from the store's now."""
    def renew_with_progress(
        self, claim: Claim, ttl: Seconds, progress: Any
    ) -> Awaitable[Union[Renewed, Lost]]:
        """``renew``, recording ``progress`` (any JSON value but ``None``) in
        the same fenced write; ``Lost`` writes neither."""
    def renew_many(
        self, claims: Iterable[Claim], ttl: Seconds
    ) -> Awaitable[List[Union[Renewed, Lost]]]:
        """``renew`` for many claims in one call, answers in order."""
    def transition(
        self,
        claim: Claim,
        status: Union[Status, str],
        *,
        error: Optional[str] = None,
        stop_reason: Optional[str] = None,
    ) -> Awaitable[Union[Applied, Rejected]]:
        """The fenced status write."""
    def claim_for_takeover(
        self,
        id: str,
        claimer: str,
        *,
        ttl: Optional[Seconds] = None,
        fail: Optional[str] = None,
        grace: Optional[Seconds] = None,
    ) -> Awaitable[Union[Taken, NotTaken]]:
        """Takes ``id`` over once its owner's lease (plus ``grace``) lapsed:
        adopts it under ``ttl``, or with ``fail="why"`` marks it failed."""
    def list_expired(
        self,
        grace: Optional[Seconds] = None,
        *,
        created_before: Optional[datetime] = None,
        limit: Optional[int] = None,
    ) -> Awaitable[ExpiredScan]:
        """Active records whose lease (plus ``grace``) lapsed."""
    def get(self, id: str) -> Awaitable[Optional[LeaseRecord]]:
        """The record ``id``, or ``None``."""
    def list_by_scope(self, scope: str) -> Awaitable[List[LeaseRecord]]:
        """The records holding or having held ``scope``."""
    def list_active(self) -> Awaitable[List[LeaseRecord]]:
        """Every pending or running record."""
    def now(self) -> Awaitable[datetime]:
        """The store's clock."""
    def purge(self, older_than: Seconds) -> Awaitable[int]:
        """Deletes terminal records older than ``older_than``; how many."""
    def count_purgeable(self, older_than: Seconds) -> Awaitable[int]:
        """How many records ``purge(older_than)`` would delete."""
    # The job queue.
    def enqueue(
        self,
        queue: str,
        payload: Json,
        *,
        id: Optional[str] = None,
        run_at: Optional[datetime] = None,
        max_attempts: Optional[int] = None,
        priority: Optional[int] = None,
        requires: Optional[Iterable[str]] = None,
    ) -> Awaitable[Job]:
        """Enqueues a job; raises ``AlreadyExistsError`` for a taken id."""
    def enqueue_unique(
        self,
        queue: str,
        payload: Json,
        *,
        key: str,
        policy: str = "while_unfinished",
        period: Optional[Seconds] = None,
        id: Optional[str] = None,
        run_at: Optional[datetime] = None,
        max_attempts: Optional[int] = None,
        priority: Optional[int] = None,
        requires: Optional[Iterable[str]] = None,
    ) -> Awaitable[Union[Created, Duplicate]]:
        """Enqueues a job unless a job of ``queue`` holds ``key``, atomically.

        ``policy``: ``"while_queued"``, ``"while_unfinished"``, or
        ``"for_period"`` with ``period`` seconds (whole milliseconds).
        ``Duplicate`` names the job holding the key; nothing is stored."""
    def claim(
        self,
        queue: str,
        worker: str,
        ttl: Seconds,
        *,
        limit: int = 1,
        capabilities: Optional[Iterable[str]] = None,
    ) -> Awaitable[List[ClaimedJob]]:
        """Claims up to ``limit`` due jobs (best priority, then oldest)."""
    def claim_limited(
        self,
        queue: str,
        worker: str,
        ttl: Seconds,
        *,
        rate_limit: Optional[RateLimit] = None,
        limit: int = 1,
        capabilities: Optional[Iterable[str]] = None,
    ) -> Awaitable[Claimed]:
        """``claim`` within ``rate_limit``: each job claimed uses one permit,
        so at most as many jobs as permits are left are claimed, atomically.
        ``Claimed.retry_after`` is the seconds until the next permit frees
        when the limit held back a claimable job, else ``None``; a claim
        that finds nothing uses no permit. Without ``rate_limit`` it claims
        as ``claim`` does."""
    def claim_within(
        self,
        queue: str,
        worker: str,
        ttl: Seconds,
        concurrency: ConcurrencyLimit,
        *,
        capabilities: Optional[Iterable[str]] = None,
    ) -> Awaitable[Union[RunningJob, Full, None]]:
        """Claims one job of ``queue`` within ``concurrency``: at most
        ``limit.capacity`` jobs claimed through ``limit.key`` run at once,
        across workers and queues. First a slot lease of the limit's
        counted scope is admitted for ``worker`` under ``ttl`` (taking over
        the slot of a worker whose lease lapsed when none is free), then
        one job is claimed.

        Answers a ``RunningJob`` (the job and its slot: renew both while it
        runs, then ``complete()`` or ``fail()`` it, which frees the slot),
        ``Full`` (every slot held by a worker whose lease is valid; nothing
        claimed) or ``None`` (no job was due; the slot was given back)."""
    def renew_job(self, claim: JobClaim, ttl: Seconds) -> Awaitable[Union[Renewed, Lost]]:
        """Extends a job claim's lease."""
    def renew_job_with_progress(
        self, claim: JobClaim, ttl: Seconds, progress: Any
    ) -> Awaitable[Union[Renewed, Lost]]:
        """``renew_job``, recording ``progress`` in the same fenced write."""
    def complete(self, claim: JobClaim) -> Awaitable[Union[Settled, Rejected]]:
        """The fenced completion."""
    def complete_many(
        self, claims: Iterable[JobClaim]
    ) -> Awaitable[List[Union[Settled, Rejected]]]:
        """``complete`` for many claims in one call, answers in order."""
    def fail(
        self,
        claim: JobClaim,
        error: str,
        *,
        backoff: Optional[Seconds] = None,
        dead_letter: bool = False,
    ) -> Awaitable[Union[Settled, Rejected]]:
        """The fenced failure: queued again after ``backoff`` while
        attempts are left, else (or with ``dead_letter``) dead-lettered."""
    def reap(self, grace: Optional[Seconds] = None) -> Awaitable[ReapReport]:
        """Requeues (or dead-letters) claims whose lease lapsed."""
    def take_back(
        self, claim: JobClaim, ttl: Seconds
    ) -> Awaitable[Union[TakenBack, NotTakenBack]]:
        """Claims back a job the reaper dead-lettered from ``claim``."""
    def get_job(self, id: str) -> Awaitable[Optional[Job]]:
        """The job ``id``, or ``None``."""
    def list_dead_letters(self, queue: str, limit: int = 100) -> Awaitable[List[Job]]:
        """Dead letters of ``queue``, oldest first."""
    def list_jobs(
        self,
        queue: str,
        state: Optional[Union[JobState, str]] = None,
        limit: int = 100,
    ) -> Awaitable[List[Job]]:
        """Jobs of ``queue`` (in ``state``)."""
    def count_jobs(self) -> Awaitable[List[QueueCounts]]:
        """Every queue holding a job, its jobs counted by state."""
    def retry_dead_letter(self, id: str) -> Awaitable[Union[Requeued, NotRequeued]]:
        """An operator's retry of a dead letter."""
    def purge_jobs(self, older_than: Seconds) -> Awaitable[int]:
        """Deletes finished jobs older than ``older_than``; how many."""
    # Fence gates.
    def check_fence(self, resource: str, fence: int) -> Awaitable[Union[Accepted, Stale]]:
        """The gate of ``resource``: ``Accepted`` when no higher fence wrote
        (this one is then the highest), else ``Stale``."""
    def list_fences(
        self, after: Optional[str] = None, limit: int = 1000
    ) -> Awaitable[List[GateRecord]]:
        """The gates kept, in byte order of resource, those after `after`, at most `limit`."""
        ...
    def highest_fence(self, resource: str) -> Awaitable[Optional[int]]:
        """The highest fence ``resource``'s gate accepted."""
    def purge_fences(self, unused_for: Seconds) -> Awaitable[int]:
        """Deletes gates unused for ``unused_for``; how many."""

class Inbox:
    """Internal: answers from the Rust threads for one event loop, run by
    the loop when ``fileno()`` is readable (``tenure._bridge``)."""

    def __init__(self) -> None: ...
    def fileno(self) -> int: ...
    def run(self) -> None: ...

class Held:
    """Work a keeper holds: the base of ``Run`` and ``JobRun``.
    ``async with held:`` runs the body under its lease: the body's task is
    cancelled the moment the lease is lost (then ``OwnershipLostError`` is
    raised from the ``async with``); a body that returns completes the
    work, one that raises fails it."""

    @property
    def id(self) -> str: ...
    @property
    def fence(self) -> int:
        """The fencing token: present it to every resource the work writes."""
    @property
    def loss(self) -> Optional[str]:
        """Why the lease was lost (``"owner_changed"``, ``"deadline_passed"``,
        ``"event_loop_stalled"``, ...), ``None`` while held."""
    def report_progress(self, progress: Any) -> Awaitable[None]:
        """Reports ``progress`` (any JSON value but ``None``) with a fenced
        renewal; raises ``OwnershipLostError`` once the lease is lost."""
    def check(self) -> Awaitable[None]:
        """Raises ``OwnershipLostError`` once the lease is lost."""
    async def __aenter__(self) -> "Held": ...
    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool: ...

class Run(Held):
    """A run's lease held by a keeper."""

    @property
    def claim(self) -> Claim: ...
    def mark_running(self) -> Awaitable[LeaseRecord]:
        """The fenced ``pending → running`` write."""
    def complete(
        self,
        status: Union[Status, str, None] = None,
        *,
        error: Optional[str] = None,
        stop_reason: Optional[str] = None,
    ) -> Awaitable[LeaseRecord]:
        """The fenced terminal write (default ``succeeded``)."""
    async def __aenter__(self) -> "Run": ...

class JobRun(Held):
    """A job claim held by a keeper (a body that raises fails the job,
    retried while attempts are left)."""

    @property
    def job(self) -> Job: ...
    @property
    def claim(self) -> JobClaim: ...
    def complete(self) -> Awaitable[Job]: ...
    def fail(
        self,
        error: str,
        *,
        backoff: Optional[Seconds] = None,
        dead_letter: bool = False,
    ) -> Awaitable[Job]: ...
    async def __aenter__(self) -> "JobRun": ...

class RunningJob:
    """A job claimed through a ``ConcurrencyLimit`` (``Store.claim_within``),
    with the slot lease its worker holds while it runs. The job counts
    against the limit while its worker holds the slot: renew both (every
    third of the ttl, say) and stop the work when either is ``Lost``."""

    __match_args__ = ("job", "slot")
    @property
    def job(self) -> ClaimedJob:
        """The job and its claim, as ``claim`` answers them."""
    @property
    def slot(self) -> LeaseRecord:
        """The slot lease, as admitted (``slot.slots[limit.key]`` is the
        slot number)."""
    @property
    def slot_claim(self) -> Claim:
        """The claim on the slot lease."""
    def renew(
        self, ttl: Seconds
    ) -> Awaitable[Tuple[Union[Renewed, Lost], Optional[Union[Renewed, Lost]]]]:
        """Renews the slot, then, while the slot is held, the job:
        ``(slot_renewal, job_renewal)``. A lost slot means another claim
        took it over: the job no longer counts against the limit, is not
        renewed (``None``), and the work should stop."""
    def complete(self) -> Awaitable[Union[Settled, Rejected]]:
        """Completes the job (the fenced completion), then gives the slot
        back; answers the job's settle."""
    def fail(
        self,
        error: str,
        *,
        backoff: Optional[Seconds] = None,
        dead_letter: bool = False,
    ) -> Awaitable[Union[Settled, Rejected]]:
        """Fails the job as ``Store.fail`` does, then gives the slot back."""
    def release(self) -> Awaitable[Union[Applied, Rejected]]:
        """Gives the slot back, the job left as it is: ``Applied`` while
        this worker held the slot, ``Rejected`` once another claim took it
        over."""

class Keeper:
    """The native keeper; use ``tenure.Keeper``, which adds the loop's
    pulse, ``async with`` and both forms of ``admit``."""

    def __init__(
        self,
        store: Store,
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
        on_recovered: Optional[Callable[[Recovered], Awaitable[None]]] = None,
        loop_stall_limit: Optional[Seconds] = ...,
    ) -> None: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def held_count(self) -> int: ...
    @property
    def state(self) -> str:
        """``"running"``, ``"stopping"`` or ``"failed"``."""
    def holds(self, id: str) -> bool: ...
    def claim_jobs(
        self,
        queue: str,
        *,
        limit: int = 1,
        capabilities: Optional[Iterable[str]] = None,
    ) -> Awaitable[List[JobRun]]:
        """Claims up to ``limit`` jobs and holds them."""
    def cancel(self, id: str) -> Awaitable[CancelResult]:
        """Cancels run ``id`` if held here; else says who has it."""
    def cancel_anywhere(self, id: str) -> Awaitable[CancelResult]:
        """Cancels run ``id`` wherever it runs (taking a lapsed one over)."""
    def reconcile_now(self) -> Awaitable[ReconcileReport]:
        """One reconciler pass, now."""
    def shutdown(self, grace: Optional[Seconds] = None) -> Awaitable[ShutdownReport]:
        """Stops the keeper; running work may finish within ``grace``
        (default 10 s)."""

class Term:
    """One term of leadership, handed to ``on_elected``."""

    @property
    def election(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def claim(self) -> Claim: ...
    @property
    def loss(self) -> Optional[str]: ...
    def check(self) -> Awaitable[None]: ...
    def stepping_down(self) -> Awaitable[None]:
        """Returns when the leader is asked to step down."""

class Election:
    """Campaigns for leadership of ``name``: ``on_elected(term)`` runs for
    every term won and is cancelled the moment leadership is lost."""

    def __init__(
        self,
        keeper: Keeper,
        name: str,
        on_elected: Callable[[Term], Awaitable[None]],
        *,
        retry_interval: Optional[Seconds] = None,
        on_term_end: Optional[Callable[[TermEnd], None]] = None,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def leadership(self) -> Leadership: ...
    def changed(self) -> Awaitable[Leadership]:
        """Waits for the next change of leadership."""
    def shutdown(self, grace: Optional[Seconds] = None) -> Awaitable[Optional[TermEnd]]:
        """Stops campaigning (a leader steps down)."""

class Firing:
    """The tick being fired, handed to a delivery."""

    @property
    def tick(self) -> Tick: ...
    @property
    def missed(self) -> List[Tick]: ...
    @property
    def fence(self) -> int: ...
    @property
    def claim(self) -> Claim: ...
    def check(self) -> Awaitable[None]: ...

class Schedule:
    """Ticks of ``every`` seconds (or at a cron expression's times, see
    ``Schedule.cron``), each fired by exactly one worker."""

    def __init__(
        self, name: str, every: Seconds, *, lookback: Optional[int] = None
    ) -> None:
        """``lookback``: how many earlier ticks a firing checks for missed
        ones (1 to 10000; default the Rust default)."""
    @staticmethod
    def cron(
        name: str, expression: str, time_zone: str, *, lookback: Optional[int] = None
    ) -> Schedule:
        """Ticks at the times a five-field cron ``expression`` names on the
        wall clocks of ``time_zone`` (an IANA name such as
        ``"Europe/Berlin"``, or ``"UTC"``): a time skipped by a
        daylight-saving change ticks when the gap ends, a repeated one once,
        at its first occurrence."""
    @property
    def name(self) -> str: ...
    @property
    def lookback(self) -> int: ...
    def tick_at(self, instant: datetime) -> Tick: ...
    def run_id(self, tick: Tick) -> str: ...
    def fire_due(
        self, keeper: Keeper, deliver: Callable[[Firing], Awaitable[None]]
    ) -> Awaitable[TickOutcome]:
        """Claims the tick due now and, if won, awaits ``deliver(firing)``
        under its lease (cancelled the moment the lease is lost)."""
