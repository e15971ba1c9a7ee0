"""tenure: distributed leases, fencing tokens and claim-for-takeover, from
asyncio.

The same contract, keeper and queue as the Rust library (this package is
built from it), on every backend its URLs name::

    import tenure

    store = await tenure.connect("postgres://postgres@127.0.0.1/test")
    async with tenure.Keeper(store, ttl=30) as keeper:
        async with keeper.admit("invoice-run-42", scopes=["account:42"]) as run:
            ...  # cancelled at once if the lease is lost; fenced writes use run.fence

Answers are typed (``Admitted``, ``Conflict``, ``Renewed``, ``Lost``, ...);
an exception (``TenureError`` and its classes) means the store could not say.
"""

from . import testing
from ._errors import (
    AlreadyExistsError,
    ConfigError,
    CorruptError,
    IncompatibleError,
    InvalidInputError,
    NotAdmitted,
    OwnershipLostError,
    RetryableError,
    StoppedError,
    TenureError,
    TimeoutError,
    UnavailableError,
)
from ._keeper import Admission, Keeper
from ._tenure import (
    Election,
    Firing,
    Held,
    JobRun,
    Run,
    Schedule,
    Store,
    Term,
    __version__,
    connect,
)
from ._types import (
    Admitted,
    Accepted,
    AlreadyExists,
    Applied,
    CancelResult,
    Claim,
    ClaimedJob,
    Conflict,
    Created,
    Duplicate,
    ExpiredScan,
    Job,
    JobClaim,
    JobState,
    Leadership,
    LeaseRecord,
    Lost,
    NotRequeued,
    NotTaken,
    NotTakenBack,
    QueueCounts,
    ReapReport,
    ReconcileReport,
    Recovered,
    Rejected,
    Renewed,
    Requeued,
    Settled,
    ShutdownReport,
    SkippedRecord,
    Stale,
    Status,
    Taken,
    TakenBack,
    TermEnd,
    Tick,
    TickOutcome,
)

__all__ = [
    "connect",
    "Store",
    "Keeper",
    "Admission",
    "Held",
    "Run",
    "JobRun",
    "Election",
    "Term",
    "Schedule",
    "Firing",
    "testing",
    "__version__",
    # answers
    "Status",
    "JobState",
    "Claim",
    "LeaseRecord",
    "SkippedRecord",
    "ExpiredScan",
    "Admitted",
    "Conflict",
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
    "Settled",
    "Created",
    "Duplicate",
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
    # exceptions
    "TenureError",
    "RetryableError",
    "InvalidInputError",
    "AlreadyExistsError",
    "UnavailableError",
    "TimeoutError",
    "CorruptError",
    "IncompatibleError",
    "ConfigError",
    "OwnershipLostError",
    "StoppedError",
    "NotAdmitted",
]
