"""The exceptions tenure raises: "the store could not say", in classes a
caller can act on.

They mirror the Rust ``ErrorKind``: catch :class:`RetryableError` to retry
(the outcome of a write is then unknown), anything else to stop. The message
is the Rust library's own, and never shows a password: ``url`` is the
store's URL with its password replaced by ``***``.
"""

from __future__ import annotations

import builtins
from typing import Any, Optional

__all__ = [
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


class TenureError(Exception):
    """A store or keeper call failed: the store could not say.

    Attributes: ``kind`` (the Rust ``ErrorKind`` name, e.g. ``"unavailable"``),
    ``message``, ``retryable``, ``outcome_unknown`` (a write may or may not
    have happened), ``field`` (the request field an ``InvalidInputError``
    names, else ``None``), ``url`` (the store's redacted URL, when known)."""

    kind = "unknown"
    retryable = False
    outcome_unknown = False

    def __init__(
        self,
        message: str,
        *,
        field: Optional[str] = None,
        url: Optional[str] = None,
        retryable: Optional[bool] = None,
        outcome_unknown: Optional[bool] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.url = url
        # The Rust error says; the class's defaults are for errors made here.
        if retryable is not None:
            self.retryable = retryable
        if outcome_unknown is not None:
            self.outcome_unknown = outcome_unknown

    def __str__(self) -> str:
        if self.url:
            return f"{self.message} (store {self.url})"
        return self.message


class RetryableError(TenureError):
    """The store could not be reached or did not answer in time: the outcome
    of a write is unknown; retrying may help."""

    retryable = True
    outcome_unknown = True


class InvalidInputError(TenureError, ValueError):
    """A request field is invalid (``field`` names it); nothing changed."""

    kind = "invalid_input"


class AlreadyExistsError(TenureError):
    """An id that must be new exists already (a job id); nothing changed."""

    kind = "already_exists"


class UnavailableError(RetryableError):
    """The store failed mid-operation or could not be reached."""

    kind = "unavailable"


class TimeoutError(RetryableError, builtins.TimeoutError):  # noqa: A001 (asyncio does the same)
    """The operation did not answer in time."""

    kind = "timeout"


class CorruptError(TenureError):
    """Data read from the store could not be decoded: an operator's matter."""

    kind = "corrupt"
    outcome_unknown = True


class IncompatibleError(TenureError):
    """The store's schema is newer than this library, or otherwise
    incompatible: upgrade, or point it elsewhere."""

    kind = "incompatible"
    outcome_unknown = True


class ConfigError(TenureError):
    """The store is configured wrongly (bad URL, unknown scheme, refused
    server settings)."""

    kind = "config"


class OwnershipLostError(TenureError):
    """The lease (or job claim) is no longer this worker's: stop the work.

    ``id`` is the lease or job, ``cause`` why (``"owner_changed"``,
    ``"deadline_passed"``, ``"event_loop_stalled"``, ...)."""

    kind = "ownership_lost"

    def __init__(
        self,
        message: str,
        *,
        id: Optional[str] = None,  # noqa: A002 (the record's own field name)
        cause: Optional[str] = None,
        **details: Any,
    ) -> None:
        super().__init__(message, **details)
        self.id = id
        self.cause = cause


class StoppedError(TenureError):
    """The keeper is shutting down or failed: it takes no new work."""

    kind = "stopped"


class NotAdmitted(Exception):
    """``async with keeper.admit(...)`` found the run not admitted.

    Contention, not a failure: ``outcome`` is the :class:`tenure.Conflict`,
    :class:`tenure.RateLimited` or :class:`tenure.AlreadyExists` the
    admission answered."""

    def __init__(self, outcome: object) -> None:
        super().__init__(f"not admitted: {outcome!r}")
        self.outcome = outcome
