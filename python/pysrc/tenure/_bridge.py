"""The event loop's end of the Rust bridge: each loop that makes calls gets
one ``Inbox``, whose descriptor it watches; answers from the Rust threads
are queued there and run by the loop, in its own thread."""

from __future__ import annotations

import asyncio
import weakref

from . import _tenure

_inboxes: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _tenure.Inbox]" = (
    weakref.WeakKeyDictionary()
)


def inbox(loop: asyncio.AbstractEventLoop) -> "_tenure.Inbox":
    """The inbox of ``loop``, registered with it on first use."""
    found = _inboxes.get(loop)
    if found is None:
        found = _tenure.Inbox()
        loop.add_reader(found.fileno(), found.run)
        _inboxes[loop] = found
    return found
