"""The values and typed outcomes tenure answers with.

Every answer is a frozen dataclass, so it prints, compares and works with
``match``::

    match await store.admit("run-1", "worker-a", scopes=["account:42"], ttl=30):
        case tenure.Admitted(record=record):
            ...
        case tenure.Conflict(holder=holder, retry_after=retry_after):
            ...
        case tenure.AlreadyExists(id=id):
            ...

Contention is an answer, never an exception: an exception
(:class:`tenure.TenureError`) means the store could not say.

Durations are seconds (``float``); instants are timezone-aware
``datetime`` objects in UTC, read from the store's clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Dict, FrozenSet, List, Optional, Union

__all__ = [
    "Status",
    "JobState",
    "Claim",
    "LeaseRecord",
    "SkippedRecord",
    "ExpiredScan",
    "RateLimit",
    "ConcurrencyLimit",
    "Admitted",
    "Conflict",
    "RateLimited",
    "AlreadyExists",
    "Renewed",
    "Lost",
    "Applied",
    "Rejected",
    "Taken",
    "NotTaken",
    "Accepted",
    "Stale",
    "Job",
    "JobClaim",
    "ClaimedJob",
    "Claimed",
    "Full",
    "Created",
    "Duplicate",
    "Settled",
    "TakenBack",
    "NotTakenBack",
    "Requeued",
    "NotRequeued",
    "QueueCounts",
    "ReapReport",
    "CancelResult",
    "ShutdownReport",
    "ReconcileReport",
    "Recovered",
    "Leadership",
    "TermEnd",
    "Tick",
    "TickOutcome",
]


class Status(str, enum.Enum):
    """A run's lifecycle state (contract §5)."""

    PENDING = "pending"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_active(self) -> bool:
        """Pending or running: the run holds its scopes."""
        return self in (Status.PENDING, Status.RUNNING)


class JobState(str, enum.Enum):
    """A job's state in its queue."""

    QUEUED = "queued"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True)
class Claim:
    """The proof of ownership every fenced write presents."""

    id: str
    owner: str
    fence: int


@dataclass(frozen=True)
class LeaseRecord:
    """One stored lease: ``owner`` runs ``id`` until ``lease_expires_at``,
    holding ``scopes``, under fencing token ``fence``."""

    id: str
    scopes: FrozenSet[str]
    kind: str
    status: Status
    owner: Optional[str]
    fence: int
    lease_expires_at: Optional[datetime]
    created_at: datetime
    updated_at: datetime
    error: Optional[str]
    stop_reason: Optional[str]
    metadata: Dict[str, Any] = field(hash=False, compare=True)
    #: The latest progress a holder reported with a renewal
    #: (``Store.renew_with_progress``); ``None`` until the first.
    progress: Any = field(default=None, hash=False, compare=True)
    #: The slot held in each counted scope among ``scopes`` (admitted with
    #: ``counted_scopes=``), numbered from 0 and kept through renewals and
    #: takeovers (contract §17); empty for exclusive scopes only.
    slots: Dict[str, int] = field(default_factory=dict, hash=False, compare=True)

    @property
    def is_active(self) -> bool:
        """Pending or running: the record holds its scopes."""
        return self.status.is_active

    def slot(self, scope: str) -> Optional[int]:
        """The slot the record holds in ``scope``: its slot when ``scope``
        is counted, 0 when it holds ``scope`` exclusively (an exclusive
        scope is slot 0 of the counted scope of that name), ``None`` when
        it does not name ``scope``. Held only while the record is active."""
        if scope not in self.scopes:
            return None
        return self.slots.get(scope, 0)

    def slot_resource(self, scope: str) -> Optional[str]:
        """The fence gate resource of the record's slot in ``scope``,
        ``"{scope}#{slot}"`` (``None`` when it does not name ``scope``):
        what the holders of one slot, one after the other, guard their
        writes with (``Store.check_fence``), so a holder that lost its slot
        is refused once its successor has written."""
        slot = self.slot(scope)
        return None if slot is None else f"{scope}#{slot}"

    def claim(self) -> Optional[Claim]:
        """The current owner's claim, if the record has an owner."""
        if self.owner is None:
            return None
        return Claim(self.id, self.owner, self.fence)


@dataclass(frozen=True)
class SkippedRecord:
    """A stored record that could not be decoded and was left out of a scan."""

    id: str
    reason: str


@dataclass(frozen=True)
class ExpiredScan:
    """The answer of ``list_expired``."""

    records: List[LeaseRecord]
    skipped: List[SkippedRecord]


# Rate limits (store.admit, keeper.admit, store.claim_limited).


@dataclass(frozen=True)
class RateLimit:
    """At most ``permits`` uses of ``key`` within any ``period`` (seconds,
    whole milliseconds, or a ``datetime.timedelta``), judged by the store's
    clock (contract §16).

    The three together name one log of the store's, shared by admissions
    (one permit each when admitted) and job claims (one per job claimed)
    across every worker; the same key with other permits or another period
    is another log. The store checks the values: a key that is no name,
    permits outside 1 to 1000 or a period outside 1 ms to 366 days raise
    ``InvalidInputError`` (``field`` ``"rate_limit"``)."""

    key: str
    permits: int
    period: Union[float, timedelta]


# Concurrency limits (store.claim_within).


@dataclass(frozen=True)
class ConcurrencyLimit:
    """At most ``capacity`` jobs claimed through this limit running at
    once, across every worker and queue naming its ``key``
    (``Store.claim_within``).

    The limit is the counted scope ``key`` (contract §17): each claim
    through it first admits a slot lease (kind ``"concurrency_slot"``) into
    one of the scope's ``capacity`` slots, then claims one job; the slot
    frees when the worker completes, fails or releases the job, or when its
    lease lapses (the next claim through the limit then takes it over).
    The store checks the values: a key that is no name raises
    ``InvalidInputError`` (``field`` ``"scope"``), a capacity outside 1 to
    1000 ``InvalidInputError`` (``field`` ``"capacities"``)."""

    key: str
    capacity: int


@dataclass(frozen=True)
class Full:
    """``claim_within`` claimed nothing: every slot of the limit is held by
    a worker whose lease is valid. ``holder``: the slot lease that frees
    first; ``retry_after``: seconds until its lease ends."""

    holder: LeaseRecord
    retry_after: Optional[float]


# Admission (store.admit, keeper.admit).


@dataclass(frozen=True)
class Admitted:
    """The record was created. From a keeper, ``run`` holds it and is renewed."""

    record: LeaseRecord
    interrupted: List[LeaseRecord]
    run: Optional[Any] = None


@dataclass(frozen=True)
class Conflict:
    """A scope is held by ``holder``; nothing changed. ``retry_after``: seconds
    until its lease (plus grace) ends, when it has a valid one."""

    holder: LeaseRecord
    retry_after: Optional[float]


@dataclass(frozen=True)
class RateLimited:
    """The scopes would admit it, but its ``rate_limit`` (named by ``key``)
    has no permit left; nothing changed. ``retry_after``: seconds until a
    permit frees."""

    key: str
    retry_after: float


@dataclass(frozen=True)
class AlreadyExists:
    """A record with this id exists already; nothing changed."""

    id: str


# Renewal (store.renew, store.renew_job).


@dataclass(frozen=True)
class Renewed:
    """The lease now runs until ``expires_at`` (store time)."""

    expires_at: datetime


@dataclass(frozen=True)
class Lost:
    """The claim no longer holds the lease: stop the work.

    ``reason`` for a run: ``"missing"``, ``"terminal"`` (``status`` says which),
    ``"interrupted"``, ``"owner_changed"``, ``"fence_changed"``; for a job:
    ``"missing"``, ``"completed"``, ``"dead_lettered"``, ``"requeued"``,
    ``"owner_changed"``, ``"fence_changed"``."""

    reason: str
    status: Optional[Status] = None


# Fenced status writes (store.transition) and job settles.


@dataclass(frozen=True)
class Applied:
    """The write happened; the record as it now is."""

    record: LeaseRecord


@dataclass(frozen=True)
class Rejected:
    """Nothing changed. ``reason``: ``"missing"``, ``"terminal"`` (``status``),
    ``"stale"`` (a peer took over), ``"not_allowed"`` (``status`` →
    ``requested`` is not a transition); for a job settle, a :class:`Lost`
    reason."""

    reason: str
    status: Optional[Union[Status, JobState]] = None
    requested: Optional[Status] = None


# Takeover (store.claim_for_takeover).


@dataclass(frozen=True)
class Taken:
    """The claimer won: the record with its new owner and fence."""

    record: LeaseRecord


@dataclass(frozen=True)
class NotTaken:
    """Nothing changed. ``reason``: ``"lease_valid"`` (``retry_after``
    seconds), ``"terminal"`` (``status``), ``"interrupted"``, ``"missing"``."""

    reason: str
    retry_after: Optional[float] = None
    status: Optional[Status] = None


# Fence gates (store.check_fence).


@dataclass(frozen=True)
class Accepted:
    """No higher fence was accepted for the resource: the write may go ahead."""


@dataclass(frozen=True)
class Stale:
    """A higher fence wrote already: the presenting worker lost its lease and
    must not write."""

    presented: int
    highest_seen: int


# The job queue.


@dataclass(frozen=True)
class Job:
    """One job of a queue."""

    id: str
    queue: str
    payload: Any = field(hash=False, compare=True)
    priority: int
    run_at: datetime
    attempt: int
    max_attempts: int
    required_capabilities: FrozenSet[str]
    state: JobState
    owner: Optional[str]
    fence: int
    lease_expires_at: Optional[datetime]
    last_error: Optional[str]
    dead_reason: Optional[str]
    created_at: datetime
    updated_at: datetime
    taken_back: int
    #: The latest progress its holder reported with a renewal
    #: (``Store.renew_job_with_progress``); ``None`` until the first.
    progress: Any = field(default=None, hash=False, compare=True)
    #: Its uniqueness key in the queue (``Store.enqueue_unique``), if any.
    unique_key: Optional[str] = None
    #: How it holds the key: ``"while_queued"``, ``"while_unfinished"`` or
    #: ``"for_period"``; ``None`` without a key.
    unique_policy: Optional[str] = None
    #: When a ``"for_period"`` key is released (its creation plus the period).
    unique_until: Optional[datetime] = None

    def claim(self) -> Optional["JobClaim"]:
        """The claim of the worker holding the job, while it is claimed."""
        if self.state is not JobState.CLAIMED or self.owner is None:
            return None
        return JobClaim(self.id, self.owner, self.fence, self.attempt)


@dataclass(frozen=True)
class JobClaim:
    """What a worker holds after claiming a job."""

    id: str
    owner: str
    fence: int
    attempt: int


@dataclass(frozen=True)
class ClaimedJob:
    """A claimed job and the claim its writes present."""

    job: Job
    claim: JobClaim


@dataclass(frozen=True)
class Claimed:
    """What ``claim_limited`` claimed: ``jobs``, best first, as ``claim``
    answers them. ``retry_after``: when the rate limit held back a claimable
    job, the seconds until its next permit frees; else ``None``."""

    jobs: List[ClaimedJob]
    retry_after: Optional[float] = None


@dataclass(frozen=True)
class Created:
    """``enqueue_unique`` stored the job: the job as stored."""

    job: Job


@dataclass(frozen=True)
class Duplicate:
    """``enqueue_unique`` stored nothing: ``job`` holds the key in the queue
    (as it now is)."""

    job: Job


@dataclass(frozen=True)
class Settled:
    """The job was completed, requeued for retry, deferred or dead-lettered:
    the job as it now is."""

    job: Job


@dataclass(frozen=True)
class TakenBack:
    """A job the reaper dead-lettered is claimed again by its last worker."""

    job: Job
    claim: JobClaim


@dataclass(frozen=True)
class NotTakenBack:
    """Nothing changed. ``reason``: ``"missing"``, ``"not_dead_lettered"``
    (``state``), ``"not_by_reaper"`` (``dead_reason``),
    ``"not_the_reaped_claim"``."""

    reason: str
    state: Optional[JobState] = None
    dead_reason: Optional[str] = None


@dataclass(frozen=True)
class Requeued:
    """An operator's retry of a dead letter: the job queued again."""

    job: Job


@dataclass(frozen=True)
class NotRequeued:
    """Nothing changed. ``reason``: ``"missing"`` or ``"not_dead_lettered"``
    (``state``)."""

    reason: str
    state: Optional[JobState] = None


@dataclass(frozen=True)
class GateRecord:
    """One fence gate the store keeps: its resource, the highest fence it
    accepted, and when its last accepted check was (the store's clock)."""

    resource: str
    fence: int
    checked_at: datetime


@dataclass(frozen=True)
class QueueCounts:
    """How many jobs of a queue are in each state."""

    queue: str
    queued: int
    claimed: int
    completed: int
    dead_lettered: int


@dataclass(frozen=True)
class ReapReport:
    """What a reaper pass did with the expired claims it found."""

    requeued: List[Job]
    dead_lettered: List[Job]


# The keeper.


@dataclass(frozen=True)
class CancelResult:
    """What ``keeper.cancel`` / ``keeper.cancel_anywhere`` did.

    ``outcome``: ``"cancelled"``, ``"cancelled_by_takeover"``,
    ``"lease_valid_elsewhere"`` (``retry_after``), ``"not_active_locally"``,
    ``"taken_over"``, ``"not_cancellable"`` (``status``; ``None`` from
    ``cancel`` when no such run exists), ``"completing"``, ``"not_found"``
    (``cancel_anywhere``), ``"unknown"`` (the store could not say; a local
    run is stopped anyway)."""

    outcome: str
    retry_after: Optional[float] = None
    status: Optional[Status] = None
    record: Optional[LeaseRecord] = None


@dataclass(frozen=True)
class ShutdownReport:
    """What ``keeper.shutdown`` did."""

    drained: bool
    stopped_runs: List[str]
    stopped_jobs: List[str]
    reconciler_cancelled: bool


@dataclass(frozen=True)
class ReconcileReport:
    """What one reconciler pass did."""

    scanned: int
    recovered: List[str]
    released: List[str]
    skipped_own: List[str]
    undecodable: List[SkippedRecord]
    not_taken: int
    claim_errors: int
    callback_failed: List[str]


@dataclass(frozen=True)
class Recovered:
    """An orphan the reconciler recovered, handed to ``on_recovered``:
    ``run`` holds it when the keeper adopts orphans, else ``None`` (the
    record was failed as orphaned)."""

    record: LeaseRecord
    run: Optional[Any]


@dataclass(frozen=True)
class Leadership:
    """An election as this worker sees it. ``state``: ``"campaigning"``,
    ``"following"`` (``leader``, ``fence``), ``"leading"`` (``fence``),
    ``"stopped"``."""

    state: str
    leader: Optional[str] = None
    fence: Optional[int] = None

    @property
    def is_leading(self) -> bool:
        """This worker leads."""
        return self.state == "leading"


@dataclass(frozen=True)
class TermEnd:
    """Why a term ended. ``reason``: ``"lost"`` (``detail``: the loss cause),
    ``"work_returned"``, ``"work_failed"`` (``detail``: the error),
    ``"stepped_down"``, ``"stopped_at_deadline"``."""

    reason: str
    detail: Optional[str] = None


@dataclass(frozen=True)
class Tick:
    """One tick of a schedule: the instants ``start`` (included) to ``end``."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class TickOutcome:
    """What firing a tick did.

    ``outcome``: ``"delivered"``, ``"delivery_failed"`` (``error``),
    ``"lost"`` (``cause``; ``delivered`` says whether the delivery had
    returned), ``"late"`` (the tick was over before it could be claimed),
    ``"elsewhere"`` (another worker claimed it). ``missed`` lists the
    earlier ticks nobody fired, as far as the schedule looks back."""

    outcome: str
    tick: Tick
    fence: Optional[int] = None
    missed: List[Tick] = field(default_factory=list)
    error: Optional[str] = None
    cause: Optional[str] = None
    delivered: bool = False
