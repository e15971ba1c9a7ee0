"""Shared fixtures: one fresh, isolated store per test, on every backend.

``store`` is parametrized over five backends (test ids ``memory``,
``sqlite``, ``postgres``, ``redis``, ``etcd``). PostgreSQL and Redis read
their URL from ``TENURE_PG_URL`` / ``TENURE_REDIS_URL``; etcd is a private
single-member server this session starts (``etcd`` and ``etcdctl`` from
Debian's ``etcd-server`` and ``etcd-client``) and stops at its end, unless
``TENURE_ETCD_URL`` names one. What is missing skips the test, unless
``TENURE_REQUIRE_SERVICES=1`` (CI), where it is a failure.

Isolation: SQLite gets a new file under ``tmp_path``; PostgreSQL a new
schema ``py_<hex>`` (dropped at teardown); Redis a new namespace
``py_<hex>`` (its keys, all under ``tenure:{py_<hex>}:``, deleted at
teardown); etcd a new key prefix ``py_<hex>`` (the private server's data
directory is removed with the session's temporary files).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

import pytest

import tenure

BACKENDS = ["memory", "sqlite", "postgres", "redis", "etcd"]
ENV = {"postgres": "TENURE_PG_URL", "redis": "TENURE_REDIS_URL"}


def new_id(prefix: str = "t") -> str:
    """A fresh id, so no two tests (or two runs) share a record."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def wait_for(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05
) -> Any:
    """Polls ``predicate`` (sync or async) until it answers truthy, or fails
    after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


@dataclass
class BackendSpec:
    """How to open (again) the store of one test: ``connect()`` answers a
    new ``Store`` on the same data (except for ``memory``, where every
    connect is a new, empty store)."""

    name: str
    url: str
    options: Dict[str, Any] = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """Whether a second ``connect()`` sees the same records."""
        return self.name != "memory"

    async def connect(self) -> "tenure.Store":
        return await tenure.connect(self.url, **self.options)


def _missing(name: str, what: str) -> None:
    """Skips the test, or fails it under TENURE_REQUIRE_SERVICES=1."""
    if os.environ.get("TENURE_REQUIRE_SERVICES") == "1":
        pytest.fail(
            f"backend {name!r} needs {what} (TENURE_REQUIRE_SERVICES=1 forbids skipping)",
            pytrace=False,
        )
    pytest.skip(f"backend {name!r} needs {what}")


def _service_url(name: str) -> str:
    variable = ENV[name]
    url = os.environ.get(variable)
    if not url:
        _missing(name, f"{variable} set")
    return url


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``etcd://127.0.0.1:PORT`` of a private single-member etcd, started
    for the session (or ``TENURE_ETCD_URL``)."""
    given = os.environ.get("TENURE_ETCD_URL")
    if given:
        yield given
        return
    etcd, etcdctl = shutil.which("etcd"), shutil.which("etcdctl")
    if etcd is None or etcdctl is None:
        _missing("etcd", "etcd and etcdctl (Debian: etcd-server, etcd-client)")
    client, peer = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
    data = tmp_path_factory.mktemp("etcd")
    with open(data / "etcd.log", "wb") as log:
        process = subprocess.Popen(
            [
                etcd,
                "--name=py",
                f"--data-dir={data / 'member'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=py={peer}",
                "--max-txn-ops=4096",
                "--max-request-bytes=10485760",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            health = subprocess.run(
                [etcdctl, f"--endpoints={client}", "endpoint", "health", "--command-timeout=2s"],
                capture_output=True,
                timeout=30,
            )
            if health.returncode == 0:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"the private etcd did not come up; its log: {data / 'etcd.log'}",
                    pytrace=False,
                )
        yield "etcd://" + client.removeprefix("http://")
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _drop_pg_schema(url: str, schema: str) -> None:
    subprocess.run(
        ["psql", url, "-q", "-c", f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'],
        check=False,
        capture_output=True,
        timeout=60,
    )


def _delete_redis_namespace(url: str, namespace: str) -> None:
    # Every key of a namespace starts with `tenure:{<namespace>}:`
    # (backend-redis/src/keys.rs).
    found = subprocess.run(
        ["redis-cli", "-u", url, "--scan", "--pattern", f"tenure:{{{namespace}}}:*"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    keys = [key for key in found.stdout.split("\n") if key]
    for start in range(0, len(keys), 500):
        subprocess.run(
            ["redis-cli", "-u", url, "DEL", *keys[start : start + 500]],
            check=False,
            capture_output=True,
            timeout=60,
        )


@pytest.fixture(params=BACKENDS)
def backend_spec(request: pytest.FixtureRequest, tmp_path) -> Any:
    """The backend of this test, with an isolated location on it."""
    name = request.param
    suffix = uuid.uuid4().hex[:12]
    if name == "memory":
        yield BackendSpec(name, "memory:")
    elif name == "sqlite":
        yield BackendSpec(name, f"sqlite://{tmp_path / 'tenure.db'}")
    elif name == "postgres":
        url = _service_url(name)
        schema = f"py_{suffix}"
        try:
            yield BackendSpec(name, url, {"schema": schema})
        finally:
            _drop_pg_schema(url, schema)
    elif name == "redis":
        url = _service_url(name)
        namespace = f"py_{suffix}"
        try:
            yield BackendSpec(name, url, {"namespace": namespace})
        finally:
            _delete_redis_namespace(url, namespace)
    else:
        yield BackendSpec(name, f"{request.getfixturevalue('etcd_endpoint')}/py_{suffix}")


@pytest.fixture
def backend(backend_spec: BackendSpec) -> str:
    """The backend's name: memory, sqlite, postgres, redis or etcd."""
    return backend_spec.name


@pytest.fixture
async def store(backend_spec: BackendSpec) -> "tenure.Store":
    """A fresh store on the backend of this test."""
    return await backend_spec.connect()


@pytest.fixture
def shared_backend_spec(backend_spec: BackendSpec) -> BackendSpec:
    """``backend_spec``, for tests that need a second connection to the same
    data (memory is skipped: each of its connects is a new store)."""
    if not backend_spec.shared:
        pytest.skip("memory: a second connect is a different store")
    return backend_spec


def pytest_configure(config):
    for name in BACKENDS:
        config.addinivalue_line("markers", f"{name}: runs on the {name} backend")


def pytest_collection_modifyitems(items):
    """Marks each backend-parametrized test with its backend (``-m redis``)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        name: Optional[str] = callspec.params.get("backend_spec")
        if name in BACKENDS:
            item.add_marker(getattr(pytest.mark, name))
