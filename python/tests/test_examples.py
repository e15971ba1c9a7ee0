"""Runs each example program of ``examples/`` as a subprocess and asserts it
exits 0 within 120 s: on a SQLite file always, and on PostgreSQL / Redis
when ``TENURE_PG_URL`` / ``TENURE_REDIS_URL`` name a server (each run in a
fresh schema / namespace, given as the URL's ``?schema=`` / ``?namespace=``
parameter, which ``tenure.connect`` reads)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ["run_manager", "job_worker", "cron_tick"]
TIMEOUT = 120


def with_parameter(url: str, name: str, value: str) -> str:
    """``url`` with the query parameter ``name`` set to ``value``."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != name]
    query.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(query)))


def url_for(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite://{tmp_path / 'example.db'}"
    fresh = f"py_ex_{uuid.uuid4().hex[:12]}"
    if backend == "postgres":
        base = os.environ.get("TENURE_PG_URL")
        if not base:
            pytest.skip("TENURE_PG_URL is not set")
        return with_parameter(base, "schema", fresh)
    base = os.environ.get("TENURE_REDIS_URL")
    if not base:
        pytest.skip("TENURE_REDIS_URL is not set")
    return with_parameter(base, "namespace", fresh)


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis"])
@pytest.mark.parametrize("name", NAMES)
def test_example(name: str, backend: str, tmp_path: Path) -> None:
    url = url_for(backend, tmp_path)
    try:
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / f"{name}.py"), url],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=EXAMPLES.parent,
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{name} on {backend} did not finish within {TIMEOUT} s:\n{expired.stdout}")
    crashed_at_exit = done.returncode in (-11, -6, 139, 134) and "all checks passed" in done.stdout
    assert done.returncode == 0, (
        f"{name} on {backend} exited {done.returncode}"
        + (" after all its checks passed: the interpreter crashed at exit (a tokio thread "
           "of pyo3-async-runtimes touching Python objects during finalization)"
           if crashed_at_exit else "")
        + "\n"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    assert "all checks passed" in done.stdout
