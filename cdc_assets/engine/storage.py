"""Where the warehouse's files live: a local folder or an object store (gs://, s3://).

delta-rs reaches an object store through its storage options; Arrow's filesystems read and
write the warehouse's other files (BigQuery extracts, a run's note, the data files Spark's
Python workers write, since Spark here has no Cloud Storage or S3 connector). Both take their
settings from the environment, the usual way for each store: application default credentials
(or GOOGLE_APPLICATION_CREDENTIALS) for Cloud Storage, the AWS_* variables for S3 and
S3-compatible servers. The settings travel inside Spark tasks, because an executor's
environment is not the driver's (a Spark Connect server started earlier, a cluster's
workers). No setting is ever logged.
"""
from __future__ import annotations

import functools
import os
import posixpath
import uuid

from ..core.errors import TerminalError

SCHEMES = ("gs", "s3")

# The environment variables that configure each store, read once per call of `settings`.
_S3_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
           "AWS_DEFAULT_REGION", "AWS_ALLOW_HTTP", "AWS_S3_LOCKING_PROVIDER", "DELTA_DYNAMO_TABLE_NAME",
           "AWS_CONDITIONAL_PUT")
_GCS_ENV = ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT")


class StorageError(TerminalError, OSError):
    """An object store refused or failed a request; the message names the location."""


def scheme(location: str) -> str | None:
    head, sep, _ = location.partition("://")
    return head.lower() if sep else None


def is_remote(location: str) -> bool:
    return scheme(location) in SCHEMES


def settings() -> dict:
    """The environment's store settings, to hand to Spark tasks with the work."""
    return {k: os.environ[k] for k in _S3_ENV + _GCS_ENV if os.environ.get(k)}


def delta_options(location: str, s: dict | None = None) -> dict | None:
    """delta-rs storage options for a table at `location` (None for a local table)."""
    kind = scheme(location)
    if kind not in SCHEMES:
        return None
    s = settings() if s is None else s
    if kind == "gs":
        return {"google_application_credentials": s["GOOGLE_APPLICATION_CREDENTIALS"]} \
            if "GOOGLE_APPLICATION_CREDENTIALS" in s else {}
    opts = {k.lower(): v for k, v in s.items() if k.startswith("AWS_") and k != "AWS_DEFAULT_REGION"}
    if "aws_region" not in opts and "AWS_DEFAULT_REGION" in s:
        opts["aws_region"] = s["AWS_DEFAULT_REGION"]
    if opts.get("aws_endpoint_url", "").startswith("http://"):
        opts.setdefault("aws_allow_http", "true")
    if "aws_s3_locking_provider" not in opts:
        # S3 and S3-compatible servers refuse a second PUT of one commit file with If-None-Match:
        # two writers racing for a version cannot both win, without a lock table.
        opts.setdefault("aws_conditional_put", "etag")
    return opts


def _s3_filesystem(s: dict):
    from pyarrow import fs

    kw = {}
    endpoint = s.get("AWS_ENDPOINT_URL")
    if endpoint:
        head, sep, rest = endpoint.partition("://")
        kw["endpoint_override"], kw["scheme"] = (rest, head) if sep else (endpoint, "https")
    if s.get("AWS_ACCESS_KEY_ID"):
        kw.update(access_key=s["AWS_ACCESS_KEY_ID"], secret_key=s.get("AWS_SECRET_ACCESS_KEY", ""),
                  session_token=s.get("AWS_SESSION_TOKEN"))
    region = s.get("AWS_REGION") or s.get("AWS_DEFAULT_REGION")
    if region:
        kw["region"] = region
    return fs.S3FileSystem(**kw)


@functools.lru_cache(maxsize=8)
def _filesystem(pid: int, kind: str, frozen: tuple):
    from pyarrow import fs

    s = dict(frozen)
    if kind == "s3":
        return _s3_filesystem(s)
    if kind == "gs":
        # Arrow's Cloud Storage client finds a key file only through the environment, and a
        # Spark worker's environment is not the driver's.
        if s.get("GOOGLE_APPLICATION_CREDENTIALS") and not os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
            os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = s["GOOGLE_APPLICATION_CREDENTIALS"]
        return fs.GcsFileSystem(project_id=s.get("GOOGLE_CLOUD_PROJECT"))
    return fs.LocalFileSystem()


def filesystem(location: str, s: dict | None = None):
    """(an Arrow filesystem, the path on it) for `location`. One per process and settings: a
    forked Spark worker makes its own rather than share its parent's connections."""
    kind = scheme(location)
    s = settings() if s is None else s
    if kind in SCHEMES:
        return _filesystem(os.getpid(), kind, tuple(sorted(s.items()))), location.split("://", 1)[1]
    return _filesystem(os.getpid(), "file", ()), location


def join(location: str, *parts: str) -> str:
    return posixpath.join(location, *parts) if is_remote(location) else os.path.join(location, *parts)


def basename(location: str) -> str:
    return posixpath.basename(location.rstrip("/")) if is_remote(location) else os.path.basename(location)


def _failed(location: str, e: Exception) -> StorageError:
    return StorageError(f"{location}: {e}")


def read_bytes(location: str) -> bytes:
    """A file's bytes; FileNotFoundError when there is none."""
    if not is_remote(location):
        with open(location, "rb") as fh:
            return fh.read()
    fs, p = filesystem(location)
    try:
        with fs.open_input_stream(p) as fh:
            return fh.read()
    except FileNotFoundError:
        raise
    except OSError as e:
        if "not found" in str(e).lower() or "no such" in str(e).lower():
            raise FileNotFoundError(location) from None
        raise _failed(location, e) from None


def write_bytes(location: str, data: bytes) -> None:
    """Write a whole file so that readers see the old one or the new one, never a part: an
    object write is atomic; a local file is written aside and renamed."""
    if not is_remote(location):
        folder = os.path.dirname(location)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{os.path.basename(location)}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, location)
        return
    fs, p = filesystem(location)
    try:
        with fs.open_output_stream(p) as fh:
            fh.write(data)
    except OSError as e:
        raise _failed(location, e) from None


def list_names(folder: str) -> list[str]:
    """The names of the files directly in `folder` ([] when it does not exist)."""
    if not is_remote(folder):
        return sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n))) \
            if os.path.isdir(folder) else []
    from pyarrow import fs as pafs

    fs, p = filesystem(folder)
    try:
        infos = fs.get_file_info(pafs.FileSelector(p.rstrip("/"), allow_not_found=True))
    except OSError as e:
        raise _failed(folder, e) from None
    return sorted(posixpath.basename(i.path) for i in infos if i.type == pafs.FileType.File)


def size(location: str) -> int:
    if not is_remote(location):
        return os.path.getsize(location)
    fs, p = filesystem(location)
    return fs.get_file_info(p).size


def remove_tree(folder: str) -> None:
    """Delete a folder and everything in it; nothing when it is not there."""
    if not is_remote(folder):
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        return
    fs, p = filesystem(folder)
    try:
        fs.delete_dir(p.rstrip("/"))
    except (FileNotFoundError, OSError):
        pass  # an uncommitted write's leftovers: nothing references them


def arrow_paths(uris: list[str]):
    """(filesystem, paths) for Arrow readers of files that delta-rs lists as URIs."""
    if not uris or not is_remote(uris[0]):
        return None, list(uris)
    fs, _ = filesystem(uris[0])
    return fs, [filesystem(u)[1] for u in uris]
