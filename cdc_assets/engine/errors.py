"""The root cause of a failure, in one line: what a summary line and `status` show.

Dagster reports a failed step as `DagsterExecutionStepExecutionError: Error occurred while
executing op ...`, with the step's own exception as its cause. A Spark failure arrives as a
Py4J or PySpark error whose text holds a JVM stack trace; its root is the innermost Java
exception (`Caused by: ...`), e.g. `java.lang.OutOfMemoryError: Java heap space`.
"""
from __future__ import annotations

import re
from typing import Protocol

from ..core.errors import retryable_named

# A Java exception line: `[Caused by: ]java.lang.OutOfMemoryError[: message]`; Py4J puts `: ` before the first.
_JAVA = re.compile(r"^\s*(?::\s*|Caused by:\s*)?((?:[a-zA-Z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error|Throwable)[\w$]*)"
                   r"(?::\s?(.*))?$")
# Exceptions that only wrap another one: reporting them tells the user nothing.
_WRAPPERS = ("org.apache.spark.SparkException", "java.util.concurrent.ExecutionException",
             "java.lang.reflect.InvocationTargetException", "py4j.Py4JException")
_PYTHON_LAST = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)[\w]*)(?::\s?(.*))?$")


def _java_root(text: str) -> str | None:
    """The innermost Java exception named in a JVM stack trace, or None when there is none."""
    found = []
    for line in text.splitlines():
        m = _JAVA.match(line)
        if m and not m.group(1).startswith(("py4j.", "pyspark.")):  # Python-side names
            found.append((m.group(1), (m.group(2) or "").strip()))
    if not found:
        return None
    inner = [f for f in found if f[0] not in _WRAPPERS] or found
    # The last one named is the innermost: `Caused by:` lines follow their wrappers.
    name, message = inner[-1]
    return f"{name}: {message}" if message else name


def _python_worker_root(text: str) -> str | None:
    """The exception line that ends a Python traceback relayed from a Spark worker."""
    if "Traceback (most recent call last)" not in text:
        return None
    tail = text[text.rindex("Traceback (most recent call last)"):].splitlines()
    for line in tail[1:]:
        m = _PYTHON_LAST.match(line.strip()) if not line.startswith((" ", "\t")) else None
        if m:
            return line.strip()
    return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _describe(cls_name: str, message: str) -> str:
    text = (message or "").strip()
    root = _python_worker_root(text) or _java_root(text)
    if root:
        return root
    line = _first_line(text)
    # SerializableErrorInfo messages start with the exception's (dotted) class name already.
    head = line.split(": ", 1)[0]
    if head == cls_name or head.endswith("." + cls_name):
        line = line[len(head) + 2:] if ": " in line else ""
    return f"{cls_name}: {line}" if line else cls_name


class ErrorInfo(Protocol):
    """What is read of a Dagster SerializableErrorInfo (engine/ does not import Dagster)."""

    @property
    def cls_name(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def cause(self) -> ErrorInfo | None: ...
    @property
    def context(self) -> ErrorInfo | None: ...


def _innermost_info(info: ErrorInfo) -> ErrorInfo:
    """A Dagster SerializableErrorInfo's innermost cause that is not one of Dagster's own wrappers."""
    chain: list[ErrorInfo] = []
    current: ErrorInfo | None = info
    while current is not None and len(chain) < 50:
        chain.append(current)
        current = current.cause or current.context
    # Dagster's own wrappers only say that a step failed; the step key is reported beside this.
    user = [i for i in chain if not i.cls_name.startswith("Dagster")] or chain
    return user[-1]


def root_cause_of_info(info: ErrorInfo | None) -> str:
    """One line for a Dagster SerializableErrorInfo: its innermost cause, reduced as above."""
    if info is None:
        return ""
    deepest = _innermost_info(info)
    return _describe(deepest.cls_name, deepest.message)


def retryable_info(info: ErrorInfo | None) -> bool:
    """Whether a step's failure, as Dagster reports it, may succeed when the step runs again: its
    innermost cause's class is retryable (core/errors.py), as `retryable` judges an exception."""
    return info is not None and retryable_named(_innermost_info(info).cls_name)


def _innermost(exc: BaseException) -> BaseException:
    """An exception's innermost cause (`raise ... from`, or the one being handled)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None:
            break
        exc = nxt
    return exc


def root_cause_of_exception(exc: BaseException) -> str:
    """One line for a Python exception: its innermost cause (`raise ... from`, or the one being handled)."""
    exc = _innermost(exc)
    return _describe(type(exc).__name__, str(exc))


def retryable(exc: BaseException) -> bool:
    """Whether the same call may succeed when made again, judged by the innermost cause (core/errors.py)."""
    return bool(getattr(_innermost(exc), "retryable", False))
