"""A landing area in Google Cloud Storage: `landing: gs://bucket/prefix` in cdc.yaml.

A table's change files are the objects under `gs://bucket/prefix/<TABLE>/`, at any depth
(Datastream writes `<stream path>/yyyy/mm/dd/hh/mm/<file>`). An object is complete once it
exists, since an object write is atomic, so no rename is needed; names whose last part starts
with '.' or '_' (a `_SUCCESS` marker) are skipped, as in a local landing folder.

The client is google-cloud-storage's, with its usual credentials: application default
credentials, a service-account file named by GOOGLE_APPLICATION_CREDENTIALS, or the emulator
named by STORAGE_EMULATOR_HOST. Each process (the run's, and each Spark Python worker that
reads change files) makes its own; no credential is ever logged.
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass

from ..core.errors import TerminalError

SCHEME = "gs://"
_clients: dict[tuple, object] = {}
_lock = threading.Lock()


class ObjectError(TerminalError, OSError):
    """An object that cannot be listed or read; its message names the object and the cause."""


def is_gcs(path: str) -> bool:
    return path.startswith(SCHEME)


def split(url: str) -> tuple[str, str]:
    """('bucket', 'a/b') from 'gs://bucket/a/b/'."""
    rest = url[len(SCHEME):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ObjectError(f"{url}: no bucket named")
    return bucket, prefix.strip("/")


# Settings a Spark worker takes from the driver where its own environment lacks them (a worker
# started before a test or a user set them). Credentials never travel this way.
SHARED_SETTINGS = ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")
_shared: dict[str, str] = {}


def settings() -> dict[str, str]:
    """This process's client settings, for the tasks that read objects elsewhere: its own
    environment's, else those the driver handed this worker."""
    return {**_shared, **{k: os.environ[k] for k in SHARED_SETTINGS if os.environ.get(k)}}


def use(shared: dict[str, str] | None) -> None:
    """In a Spark worker: the driver's settings, for what this worker's environment lacks."""
    global _shared
    _shared = dict(shared or {})


@contextlib.contextmanager
def provided(storage_client):
    """Within the block, this process's reads and listings use `storage_client` (a Dagster run's,
    from its GCSResource); outside it, a client of the process's own settings."""
    key = (os.getpid(), "provided")
    with _lock:
        before = _clients.get(key)
        _clients[key] = storage_client
    try:
        yield storage_client
    finally:
        with _lock:
            if before is None:
                _clients.pop(key, None)
            else:
                _clients[key] = before


def client():
    """The client a Dagster resource provided to this process, else one for the current settings,
    one per process (a forked worker makes its own)."""
    effective = settings()
    key = (os.getpid(), tuple(sorted(effective.items())))
    with _lock:
        given = _clients.get((os.getpid(), "provided"))
        if given is not None:
            return given
        if key not in _clients:
            from google.cloud import storage

            project = effective.get("GOOGLE_CLOUD_PROJECT")
            host = effective.get("STORAGE_EMULATOR_HOST")
            if host:
                from google.auth.credentials import AnonymousCredentials

                _clients[key] = storage.Client(project=project or "emulator", credentials=AnonymousCredentials(),
                                               client_options={"api_endpoint": host})
            else:
                _clients[key] = storage.Client(project=project)
        return _clients[key]


def _skipped(name: str) -> bool:
    return any(part.startswith((".", "_")) for part in name.split("/"))


@dataclass(frozen=True)
class Listed:
    name: str  # relative to the listed folder
    size: int
    updated: float  # the object's write time, seconds since the epoch (the server's clock)
    # what changes with the object's content: its MD5 (a composed object has none: its CRC32C),
    # else its generation
    stamp: str | None = None


def list_objects(folder: str, start: str | None = None, storage_client=None) -> list[Listed]:
    """Every complete object under `folder` (a gs:// URL) whose relative name is `start` or
    after it in name order (GCS lists in that order and starts there server-side), by the given
    client (a Dagster GCSResource's) or this process's own."""
    from google.api_core import exceptions

    bucket, prefix = split(folder)
    base = prefix + "/" if prefix else ""
    try:
        blobs = list((storage_client or client()).list_blobs(
            bucket, prefix=base, start_offset=base + start if start else None))
    except exceptions.GoogleAPICallError as e:
        raise ObjectError(f"cannot list {folder}: {e.message or e}") from None
    out = []
    for blob in blobs:
        relative = blob.name[len(base):]
        # (names before `start` are dropped here too: the emulator ignores startOffset)
        if relative and not relative.endswith("/") and not _skipped(relative) and (not start or relative >= start):
            updated = blob.updated.timestamp() if blob.updated is not None else 0.0
            stamp = blob.md5_hash or blob.crc32c or (str(blob.generation) if blob.generation else None)
            out.append(Listed(relative, int(blob.size or 0), updated, stamp))
    return out


def read(url: str, start: int = 0, end: int | None = None) -> bytes:
    """The object's bytes from `start` to `end` (None: its end)."""
    from google.api_core import exceptions

    bucket, name = split(url)
    if end is not None and end <= start:
        return b""
    try:
        blob = client().bucket(bucket).blob(name)
        if not start and end is None:
            return blob.download_as_bytes()
        return blob.download_as_bytes(start=start, end=None if end is None else end - 1)  # its end is inclusive
    except exceptions.GoogleAPICallError as e:
        raise ObjectError(f"cannot read {url}: {e.message or e}") from None


def size(url: str) -> int:
    from google.api_core import exceptions

    bucket, name = split(url)
    try:
        blob = client().bucket(bucket).get_blob(name)
    except exceptions.GoogleAPICallError as e:
        raise ObjectError(f"cannot read {url}: {e.message or e}") from None
    return int(blob.size or 0) if blob is not None else 0
