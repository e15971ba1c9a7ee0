"""Test aids: a store behind a fault-injecting layer, for testing how your
code (and a keeper) behaves when the store fails, hangs or loses a reply.

The layer is the Rust ``tenure::layer::Faults``: faults are injected between
your calls and the store, never into the store itself::

    faulty = tenure.testing.with_faults(store)
    keeper = tenure.Keeper(faulty.store, ttl=2)
    ...
    faulty.inject("renew_many", "hang")   # renewals stop answering
    faulty.heal()
"""

from __future__ import annotations

from typing import Optional

from . import _tenure

__all__ = ["with_faults", "FaultyStore"]


class FaultyStore:
    """A store with a fault layer; use ``store`` wherever a store goes."""

    def __init__(self, store: "_tenure.Store") -> None:
        self.store = store._with_faults()

    def inject(self, operation: str, fault: str, id: Optional[str] = None) -> None:  # noqa: A002
        """Calls of ``operation`` (on ``id``, or any) meet ``fault``:
        ``"unavailable"``, ``"corrupt"``, ``"hang"`` or ``"reply_lost"``."""
        self.store._inject(operation, fault, id)

    def heal(self) -> None:
        """Removes every fault; hanging calls go on to the store."""
        self.store._heal()

    def calls(self, operation: str) -> int:
        """How many calls of ``operation`` have started."""
        return self.store._calls(operation)


def with_faults(store: "_tenure.Store") -> FaultyStore:
    """``store`` behind a fault layer (no fault injected yet)."""
    return FaultyStore(store)
