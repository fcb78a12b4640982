"""A throw-away PostgreSQL cluster for the test session (FIELD_NOTES, "PostgreSQL, locally"):
Debian's server (bootstrap.sh installs it), `initdb` in a temporary folder, a free local port,
`wal_level=logical` so both capture methods can be tested; stopped and removed at the end. A lock
waited for longer than 20 s is an error, so a test that blocks itself fails instead of hanging.

`initdb` refuses to run as root: as root, the cluster's commands run as the `postgres` user."""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cdc_assets_tests.support.ports import free_port


@dataclass(frozen=True)
class Cluster:
    host: str
    port: int
    user: str
    start_command: tuple[str, ...] = ()
    stop_command: tuple[str, ...] = ()

    def kill(self) -> None:
        """Stop the server at once, as a crash would (`pg_ctl stop -m immediate`: no checkpoint; the
        next start recovers from the WAL)."""
        subprocess.run(self.stop_command, check=True, capture_output=True)

    def start(self) -> None:
        subprocess.run(self.start_command, check=True, capture_output=True)

    def url(self, database: str, table: str) -> str:
        """The `source:` of a table in this cluster: postgresql://USER@HOST:PORT/DATABASE/SCHEMA.TABLE."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}/{table}"

    def connect(self, database: str = "postgres", autocommit: bool = True):
        import psycopg

        return psycopg.connect(host=self.host, port=self.port, user=self.user, dbname=database,
                               autocommit=autocommit)


def _bin_dir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else shutil.which("initdb") and os.path.dirname(shutil.which("initdb"))


@contextlib.contextmanager
def cluster(wal_level: str = "logical", **settings: str) -> Iterator[Cluster]:
    """`settings`: more server settings (name -> value), e.g. max_replication_slots="1"."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server (./bootstrap.sh test installs Debian's postgresql)")
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    folder = tempfile.mkdtemp(prefix="cdc-pg-")
    data, log = os.path.join(folder, "data"), os.path.join(folder, "server.log")
    if as_postgres:
        shutil.chown(folder, "postgres")
    port = free_port()
    try:
        subprocess.run([*as_postgres, f"{bin_dir}/initdb", "-D", data, "-A", "trust", "-U", "postgres",
                        "--no-sync"], check=True, capture_output=True)
        start = (*as_postgres, f"{bin_dir}/pg_ctl", "-D", data, "-l", log, "-w", "-o",
                 f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c wal_level={wal_level} "
                 "-c fsync=off -c max_connections=50 -c lock_timeout=20s"
                 + "".join(f" -c {name}={value}" for name, value in settings.items()), "start")
        stop = (*as_postgres, f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        subprocess.run(start, check=True, capture_output=True)
        try:
            yield Cluster("127.0.0.1", port, "postgres", start, stop)
        finally:
            subprocess.run(stop, capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    with cluster() as c:
        yield c


@pytest.fixture
def postgres_db(postgres_cluster) -> Iterator[tuple[Cluster, str]]:
    """A database of its own for one test: (the cluster, the database's name)."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    with postgres_cluster.connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield postgres_cluster, name
    # a logical-capture test's slot outlives its test: the server's slots are few (max_replication_slots)
    with postgres_cluster.connect() as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                     (name,))
