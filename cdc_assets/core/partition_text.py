"""The derived partition value: a string partition column's value as a Delta partition value that
keeps "" apart from null and always makes a folder name every reader finds.

Delta's protocol writes null, "" and empty binary alike as a null partition value, and a reader
fills a partition column from the log, not the file. Writers (delta-rs' MERGE and compaction,
Spark) put a file in a folder named `<column>=<value>`, which a file system refuses past 255
bytes, and delta-rs' change data feed reader misses a change file whose folder name it had to
percent-encode. A table whose string partition column receives "", a value too long for a folder
name, or (recording its change data feed) a value with a character a folder name encodes,
therefore keeps that column as data in its files and is partitioned by a derived column,
`_cdc_part_<column>`, holding this escape of it: never "", one value per value (so a partition of
the derived column is a partition of the column), plain characters only, short enough for a
folder name, and invertible except for a long value, which is named by its digest (the files of
such a partition hold the value itself).
"""
from __future__ import annotations

import hashlib
import re

DERIVED_PREFIX = "_cdc_part_"
# "" is the escape alone; any other byte but the kept characters is the escape and its two
# upper-case hex digits.
ESCAPE = "."
KEPT = re.compile(r"[A-Za-z0-9_-]")
# The digest's mark: the escape then a character no escaped byte starts with.
DIGEST = ESCAPE + "sha256"
# The longest name a folder may have (NAME_MAX of Linux and macOS file systems, in bytes).
MAX_FOLDER_NAME = 255
# The characters a writer puts into a folder name as they are; any other byte may be
# percent-encoded, three bytes for one.
PLAIN = re.compile(r"[A-Za-z0-9_.-]")
_HEX = re.compile(r"[0-9A-F]{2}")


def derived_column(column: str) -> str:
    """The name of the Delta partition column that stands for `column` in a derived layout."""
    return DERIVED_PREFIX + column


def is_derived_column(name: str) -> bool:
    return name.startswith(DERIVED_PREFIX)


def _encoded_bytes(text: str) -> int:
    """The most bytes `text` may take in a folder name, each byte that is not plain counted as
    its percent-encoding."""
    plain = sum(1 for ch in text if PLAIN.fullmatch(ch))
    return plain + 3 * (len(text.encode()) - plain)


def folder_bytes(column: str, value: str) -> int:
    """The most bytes the folder name `<column>=<value>` may take."""
    return _encoded_bytes(column) + 1 + _encoded_bytes(value)


def fits_a_folder(column: str, value: str) -> bool:
    return folder_bytes(column, value) <= MAX_FOLDER_NAME


def is_plain(value: str) -> bool:
    """Whether a folder name holds `value` as it is, unencoded."""
    return all(PLAIN.fullmatch(ch) for ch in value)


def digest(value: str) -> str:
    return DIGEST + hashlib.sha256(value.encode()).hexdigest()


def is_digest(derived: str | None) -> bool:
    return derived is not None and derived.startswith(DIGEST)


def escaped(value: str) -> str:
    """`value` with every character but the kept ones escaped, byte by byte; "" as the escape."""
    if value == "":
        return ESCAPE
    return "".join(ch if KEPT.fullmatch(ch) else "".join(f"{ESCAPE}{b:02X}" for b in ch.encode()) for ch in value)


def derived_value(value: str | None, column: str) -> str | None:
    """None stays None; a value of kept characters is itself (so it names its partition as it
    does in a native layout); any other is escaped, unless its folder name for `column` would
    not fit a file system: then it is the value's digest."""
    if value is None:
        return None
    text = escaped(value)
    return text if fits_a_folder(derived_column(column), text) else digest(value)


def original_value(derived: str | None) -> str | None:
    """The value `derived_value` turned into `derived` (not a digest, which names a value only
    the files hold)."""
    if derived is None:
        return None
    if is_digest(derived):
        raise ValueError("a digest names a partition value only its files hold")
    if derived == ESCAPE:
        return ""
    out, i = bytearray(), 0
    while i < len(derived):
        if derived[i] == ESCAPE and _HEX.fullmatch(derived[i + 1:i + 3]):
            out.append(int(derived[i + 1:i + 3], 16))
            i += 3
        elif derived[i] == ESCAPE:
            raise ValueError("not a derived partition value: an escape without its two hex digits")
        else:
            out += derived[i].encode()
            i += 1
    return out.decode()
