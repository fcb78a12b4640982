"""Google Cloud's local emulators, started in this process from their PyPI packages (the `test`
extra installs them): gcp-storage-emulator for Cloud Storage and bqemulator for BigQuery. The
clients of this process and of its children (Spark's Python workers) find them through the
variables each sets: STORAGE_EMULATOR_HOST and BIGQUERY_EMULATOR_HOST."""
from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
from collections.abc import Iterator

from ..core.errors import TerminalError, TransientError

PROJECT = "cdc-assets-demo"
NEEDS = "the Google Cloud emulators (gcp-storage-emulator, bqemulator) come with the test extra: " \
        ".venv/bin/uv pip install -e '.[test]' (./bootstrap.sh installs it)"


class EmulatorMissing(TerminalError, RuntimeError):
    pass


class EmulatorFailed(TransientError, RuntimeError):
    """An emulator that did not start: starting it again may work."""


@contextlib.contextmanager
def storage(bucket: str) -> Iterator[str]:
    """A Cloud Storage emulator in memory with `bucket`; yields its address."""
    try:
        from gcp_storage_emulator.server import create_server
    except ImportError:
        raise EmulatorMissing(NEEDS) from None
    server = create_server("127.0.0.1", 0, in_memory=True, default_bucket=bucket)
    server.start()
    address = f"http://127.0.0.1:{server._api._httpd.server_address[1]}"
    try:
        with _environment(STORAGE_EMULATOR_HOST=address):
            yield address
    finally:
        server.stop()


def _import_in_this_thread(package: str) -> None:
    """Import every module of `package` now, in the caller's thread. The emulator imports some of its
    modules lazily in its own server thread; under pytest they are compiled from source (bqemulator is a
    pytest plugin, whose modules pytest rewrites), and CPython 3.11's compile in a thread can fail with
    "AST constructor recursion depth mismatch" once the recursion limit has changed since that thread
    started, which stopped the emulator's start in a CI run."""
    root = importlib.import_module(package)
    for module in pkgutil.walk_packages(root.__path__, package + "."):
        with contextlib.suppress(ImportError):  # an optional part whose own dependency is absent
            importlib.import_module(module.name)


@contextlib.contextmanager
def bigquery() -> Iterator[str]:
    """A BigQuery emulator in memory (DuckDB inside); yields its address."""
    os.environ.setdefault("BQEMU_ENABLE_FORMAT_EXTENSIONS", "false")  # offline: no extension downloads
    try:
        import logging

        import duckdb_extensions
        import structlog
        from bqemulator.config import LogLevel, PersistenceMode, Settings
        from bqemulator.testing._thread_runner import ThreadedEmulator
    except ImportError:
        raise EmulatorMissing(NEEDS) from None
    # The emulator loads DuckDB's spatial extension at start; offline it comes from this wheel.
    duckdb_extensions.import_extension("spatial")
    # its own debug lines would otherwise go to this command's output
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    _import_in_this_thread("bqemulator")
    server = ThreadedEmulator(Settings(persistence_mode=PersistenceMode.EPHEMERAL, rest_port=0, grpc_port=0,
                                       log_level=LogLevel.WARNING))
    server.start()
    address = f"http://127.0.0.1:{server.server.rest_port}"
    try:
        with _environment(BIGQUERY_EMULATOR_HOST=address):
            yield address
    finally:
        server.stop()


@contextlib.contextmanager
def s3(bucket: str) -> Iterator[str]:
    """An S3-compatible server in memory (moto's server mode) with `bucket`; yields its address.
    It stands in for Cloud Storage as the warehouse's object store, since delta-rs cannot write to
    the Cloud Storage emulator; it sets the AWS_* variables delta-rs and Arrow read.
    It runs as a child process: some delta-rs calls hold Python's global lock while they wait
    for the store, which a server thread in this process could then never answer."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    try:
        import moto.server  # noqa: F401
    except ImportError:
        raise EmulatorMissing("moto's S3 server comes with the test extra: .venv/bin/uv pip install -e '.[test]'") \
            from None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{address}/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise EmulatorFailed(f"moto's S3 server did not start on {address}") from None
                time.sleep(0.2)
        with _environment(AWS_ENDPOINT_URL=address, AWS_ACCESS_KEY_ID="emulator", AWS_SECRET_ACCESS_KEY="emulator",
                          AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true"):
            import boto3

            boto3.client("s3", endpoint_url=address).create_bucket(Bucket=bucket)
            yield address
    finally:
        server.terminate()
        server.wait(timeout=30)


def bigquery_client(address: str, project: str = PROJECT):
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery as bq

    return bq.Client(project=project, credentials=AnonymousCredentials(), client_options=ClientOptions(api_endpoint=address))


@contextlib.contextmanager
def _environment(**values: str):
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
