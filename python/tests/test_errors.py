"""The exception hierarchy: every class is reachable, carries the right
``kind`` / ``retryable`` / ``outcome_unknown``, names the store's redacted
URL, and never shows a password."""

from __future__ import annotations

import asyncio
import builtins
import sqlite3

import pytest

import tenure
from tenure import (
    AlreadyExistsError,
    ConfigError,
    CorruptError,
    IncompatibleError,
    InvalidInputError,
    OwnershipLostError,
    RetryableError,
    StoppedError,
    TenureError,
    UnavailableError,
)

from .conftest import new_id

SECRET = "s3cr3t-Pa55"


def assert_error(error, cls, kind, *, retryable, outcome_unknown):
    """``error`` is a ``cls`` with these class-level properties."""
    assert isinstance(error, cls)
    assert isinstance(error, TenureError)
    assert error.kind == kind
    assert error.retryable is retryable
    assert error.outcome_unknown is outcome_unknown
    assert isinstance(error, RetryableError) is retryable
    assert error.message and error.message in str(error)


def assert_no_secret(error):
    """Neither the message, nor str(), repr() nor ``url`` shows the password."""
    for text in (str(error), repr(error), error.message, error.url or "", str(error.args)):
        assert SECRET not in text, text


# --- InvalidInputError -------------------------------------------------------


async def test_invalid_input_empty_id(store):
    """An empty id is InvalidInputError (a ValueError) naming the field,
    raised by the store with its URL."""
    with pytest.raises(InvalidInputError) as caught:
        await store.admit("", "worker-a", ttl=30)
    error = caught.value
    assert_error(error, InvalidInputError, "invalid_input", retryable=False, outcome_unknown=False)
    assert isinstance(error, ValueError)
    assert error.field == "id"
    assert error.url == store.url


@pytest.mark.parametrize("ttl", [-1.0, float("nan"), float("inf"), "soon"])
async def test_invalid_input_ttl(ttl):
    """A negative, NaN or infinite ttl (or not a number) is refused before
    anything is sent: InvalidInputError with field "ttl"."""
    store = await tenure.connect("memory:")
    with pytest.raises(InvalidInputError) as caught:
        await store.admit(new_id(), "worker-a", ttl=ttl)
    assert caught.value.field == "ttl"
    assert isinstance(caught.value, ValueError)


async def test_invalid_input_other_fields():
    """Other argument checks name their field too."""
    store = await tenure.connect("memory:")
    with pytest.raises(InvalidInputError) as caught:
        await store.admit(new_id(), "w", ttl=1, strategy="steal")
    assert caught.value.field == "strategy"
    with pytest.raises(InvalidInputError) as caught:
        await store.admit(new_id(), "w", ttl=1, scopes="one-string")
    assert caught.value.field == "scopes"
    with pytest.raises(InvalidInputError) as caught:
        await store.enqueue("q", object())
    assert caught.value.field == "payload"


# --- AlreadyExistsError ------------------------------------------------------


async def test_already_exists_on_enqueue(store):
    """Enqueueing an existing job id raises AlreadyExistsError (not retryable,
    nothing changed)."""
    queue, id = new_id("q"), new_id("job")
    await store.enqueue(queue, {"first": True}, id=id)
    with pytest.raises(AlreadyExistsError) as caught:
        await store.enqueue(queue, {"second": True}, id=id)
    assert_error(
        caught.value, AlreadyExistsError, "already_exists", retryable=False, outcome_unknown=False
    )
    assert caught.value.url == store.url
    assert (await store.get_job(id)).payload == {"first": True}


# --- ConfigError --------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "mongodb://x",
        "memory:?foo=1",
        "postgres://user:{secret}@127.0.0.1:1/x?schmea=x",
        "redis://:{secret}@127.0.0.1:1?namespce=x",
        "postgres:user:{secret}@127.0.0.1/x",
    ],
    ids=["unknown-scheme", "memory-parameter", "pg-typo", "redis-typo", "not-a-url"],
)
async def test_config_error(url):
    """An unknown scheme or URL parameter is a ConfigError, with the URL
    (password hidden)."""
    url = url.format(secret=SECRET)
    with pytest.raises(ConfigError) as caught:
        await tenure.connect(url)
    assert_error(caught.value, ConfigError, "config", retryable=False, outcome_unknown=False)
    assert caught.value.url
    assert_no_secret(caught.value)


async def test_config_error_names_the_closest_parameter():
    with pytest.raises(ConfigError, match="schema"):
        await tenure.connect("postgres://u@127.0.0.1:1/x?schmea=x")


async def test_keeper_outside_a_loop_is_config_error():
    """A Keeper needs a running loop; from another thread's plain call it is
    a ConfigError (asyncio.to_thread runs it without a loop)."""
    store = await tenure.connect("memory:")

    def make():
        return tenure._tenure.Keeper(store, ttl=5)

    with pytest.raises(ConfigError):
        await asyncio.to_thread(make)


# --- UnavailableError / TimeoutError -----------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgres://user:{secret}@127.0.0.1:1/x",
        "postgres://user@127.0.0.1:1/x?password={secret}",
        "redis://:{secret}@127.0.0.1:1",
    ],
    ids=["pg-userinfo", "pg-query", "redis-userinfo"],
)
async def test_unreachable_server_is_unavailable_and_redacted(url):
    """A server that refuses connections: UnavailableError (retryable, outcome
    unknown), its url set with the password replaced by ***."""
    url = url.format(secret=SECRET)
    with pytest.raises(UnavailableError) as caught:
        await asyncio.wait_for(tenure.connect(url), 60)
    error = caught.value
    assert_error(error, UnavailableError, "unavailable", retryable=True, outcome_unknown=True)
    assert error.url and "***" in error.url
    assert_no_secret(error)


async def test_injected_unavailable(store):
    """A fault-layer "unavailable" surfaces as UnavailableError with the
    store's URL; heal() removes it."""
    faulty = tenure.testing.with_faults(store)
    faulty.inject("get", "unavailable")
    with pytest.raises(UnavailableError) as caught:
        await faulty.store.get(new_id())
    assert_error(caught.value, UnavailableError, "unavailable", retryable=True, outcome_unknown=True)
    assert caught.value.url == store.url
    assert faulty.calls("get") == 1
    faulty.heal()
    assert await faulty.store.get(new_id()) is None


async def test_injected_fault_for_one_id_only(store):
    """A fault injected for one id leaves other ids alone."""
    faulty = tenure.testing.with_faults(store)
    bad = new_id("bad")
    faulty.inject("admit", "unavailable", bad)
    with pytest.raises(UnavailableError):
        await faulty.store.admit(bad, "w", ttl=5)
    assert isinstance(await faulty.store.admit(new_id(), "w", ttl=5), tenure.Admitted)
    faulty.heal()


async def test_timeout_from_keeper_store_timeout(store):
    """A hung admit under a Keeper's store_timeout is tenure.TimeoutError: a
    builtin TimeoutError and a RetryableError, outcome unknown."""
    faulty = tenure.testing.with_faults(store)
    async with tenure.Keeper(faulty.store, ttl=5, store_timeout=0.3, auto_reconcile=False) as keeper:
        faulty.inject("admit", "hang")
        try:
            with pytest.raises(tenure.TimeoutError) as caught:
                await asyncio.wait_for(keeper.admit(new_id()), 30)
        finally:
            faulty.heal()
    error = caught.value
    assert_error(error, tenure.TimeoutError, "timeout", retryable=True, outcome_unknown=True)
    assert isinstance(error, builtins.TimeoutError)
    assert isinstance(error, asyncio.TimeoutError)
    assert error.url == store.url


# --- CorruptError -------------------------------------------------------------


async def test_injected_corrupt(store):
    """A fault-layer "corrupt" is CorruptError: not retryable, outcome unknown."""
    faulty = tenure.testing.with_faults(store)
    faulty.inject("get", "corrupt")
    with pytest.raises(CorruptError) as caught:
        await faulty.store.get(new_id())
    assert_error(caught.value, CorruptError, "corrupt", retryable=False, outcome_unknown=True)
    assert caught.value.url == store.url
    faulty.heal()


async def test_fault_layer_refuses_unknown_names():
    """inject() names an unknown operation or fault as InvalidInputError; a
    store without fault layer refuses the test hooks."""
    store = await tenure.connect("memory:")
    faulty = tenure.testing.with_faults(store)
    with pytest.raises(InvalidInputError) as caught:
        faulty.inject("get", "explode")
    assert caught.value.field == "fault"
    with pytest.raises(InvalidInputError) as caught:
        faulty.inject("frobnicate", "hang")
    assert caught.value.field == "operation"
    with pytest.raises(InvalidInputError):
        store._heal()


# --- IncompatibleError --------------------------------------------------------


async def test_incompatible_sqlite_schema(tmp_path):
    """A SQLite file of a newer schema version is refused: IncompatibleError."""
    path = tmp_path / "newer.db"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 9999")
    connection.commit()
    connection.close()
    with pytest.raises(IncompatibleError) as caught:
        await tenure.connect(f"sqlite://{path}")
    assert_error(
        caught.value, IncompatibleError, "incompatible", retryable=False, outcome_unknown=True
    )
    assert caught.value.url == f"sqlite://{path}"


# --- OwnershipLostError / StoppedError --------------------------------------


async def test_ownership_lost_after_cancel(store):
    """After the keeper cancelled a run, its fenced writes raise
    OwnershipLostError with id and cause."""
    async with tenure.Keeper(store, ttl=10, auto_reconcile=False) as keeper:
        id = new_id("run")
        run = (await keeper.admit(id)).run
        assert (await keeper.cancel(id)).outcome == "cancelled"
        with pytest.raises(OwnershipLostError) as caught:
            await run.complete()
        error = caught.value
        assert_error(
            error, OwnershipLostError, "ownership_lost", retryable=False, outcome_unknown=False
        )
        assert error.id == id
        assert error.cause == "cancelled"
        assert run.loss == "cancelled"
        with pytest.raises(OwnershipLostError):
            await run.check()


async def test_ownership_lost_after_takeover(store):
    """A run taken over by a peer: complete() raises OwnershipLostError."""
    faulty = tenure.testing.with_faults(store)
    async with tenure.Keeper(faulty.store, ttl=1, auto_reconcile=False) as keeper:
        id = new_id("run")
        run = (await keeper.admit(id)).run
        faulty.inject("renew", "hang")
        faulty.inject("renew_many", "hang")
        try:
            deadline = asyncio.get_running_loop().time() + 20
            while not isinstance(await store.claim_for_takeover(id, "rival", ttl=30), tenure.Taken):
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
            with pytest.raises(OwnershipLostError) as caught:
                await run.complete()
            assert caught.value.id == id
        finally:
            faulty.heal()
    assert (await store.get(id)).owner == "rival"


async def test_stopped_after_shutdown(store):
    """keeper.admit after shutdown raises StoppedError."""
    keeper = tenure.Keeper(store, ttl=5, auto_reconcile=False)
    await keeper.shutdown(1)
    assert keeper.state in ("stopping", "failed")
    with pytest.raises(StoppedError) as caught:
        await keeper.admit(new_id())
    assert_error(caught.value, StoppedError, "stopped", retryable=False, outcome_unknown=False)


def test_hierarchy():
    """The classes nest as documented."""
    assert issubclass(tenure.UnavailableError, tenure.RetryableError)
    assert issubclass(tenure.TimeoutError, tenure.RetryableError)
    assert issubclass(tenure.TimeoutError, builtins.TimeoutError)
    assert issubclass(tenure.InvalidInputError, ValueError)
    for cls in (
        InvalidInputError,
        AlreadyExistsError,
        ConfigError,
        CorruptError,
        IncompatibleError,
        OwnershipLostError,
        StoppedError,
        RetryableError,
    ):
        assert issubclass(cls, TenureError)
    assert not issubclass(tenure.NotAdmitted, TenureError)
