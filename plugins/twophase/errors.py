"""Errors a person can read: the root cause of a failure, and servers that are down.

- root_cause(exc): one bounded line, "<ExceptionClass>: <message>" of the innermost
  meaningful exception. A failure inside Spark reaches the driver wrapped two or three
  times (py4j's Py4JJavaError "An error occurred while calling o312.collectToPython",
  Spark's "Job aborted due to stage failure", pyspark's PythonException "An exception was
  thrown from the Python worker"); the cause is at the bottom of the Java "Caused by:" chain,
  or in the Python worker's traceback that the Java exception's message carries.
- ServerUnreachable (KafkaUnreachable, PostgresUnreachable): a server did not answer. Every
  step maps it to "retry later" (coordinator.RetryLater, Outcome RETRY_LATER) with its
  one-line message, e.g. "Kafka at 127.0.0.1:19092 is unreachable: Connect to ... refused".
- MissingPrivilege: a Postgres role lacks a grant (Terminal).
twophase.server_errors turns the raw client errors that mean either into these, in one place.
"""

from __future__ import annotations

import re

MAX_LENGTH = 400  # of a root cause: the log's reason, the vote, the UI show it on one line

_TRACEBACK = "Traceback (most recent call last):"
# Between two tracebacks of a chain: only an explicit `raise ... from cause` makes the earlier
# one the cause; "During handling ... another exception occurred" is an unrelated failure
# while handling it, and the later exception is the one that matters.
_DIRECT_CAUSE = "The above exception was the direct cause of the following exception:"
_JAVA_HEAD = re.compile(r"^(?:: |Caused by: )?([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+): ?(.*)$")
# psycopg2 reports an exception raised by the file object COPY reads from as its own.
_COPY_READ = re.compile(r"error in \.read\(\) call: ([A-Za-z_][\w.]*) (.*)$")
# Exceptions that only say another one happened: never the root cause when there is another.
_WRAPPERS = ("Py4JJavaError", "PythonException", "UnknownException", "ExecutionException",
             "InvocationTargetException", "UndeclaredThrowableException")


class TwophaseError(Exception):
    """Base of the protocol's own errors: each is either Transient or Terminal, and the
    Airflow tasks map that to a retry or a failure in one place (twophase_airflow.errors)."""


class Transient(TwophaseError):
    """The same call may succeed later (a server down, a live concurrent attempt): retry."""


class Terminal(TwophaseError):
    """Retrying the same call cannot help; the message says why and what to do."""


class SpecError(Terminal, ValueError):
    """A load was described wrongly; the message names the field and the fix.
    (twophase.spec exports it too; it lives here so target classes need no more.)"""


class MissingPrivilege(Terminal, PermissionError):
    """A Postgres role lacks a grant; the message names it and the GRANT that fixes it
    (twophase.privileges). Terminal: the same call fails until an admin grants it."""


class ServerUnreachable(Transient, ConnectionError):
    """A server of the load did not answer; the message is one line. Retry later."""


class KafkaUnreachable(ServerUnreachable):
    pass


class PostgresUnreachable(ServerUnreachable):
    first_line = ""  # libpq's own first line ("connection to server at ... failed: Connection refused")


def one_line(text: str, limit: int = MAX_LENGTH) -> str:
    """Whitespace collapsed to single spaces; cut in the middle when longer than limit
    (both ends say something: what failed, and the path or value it failed on)."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]} … {text[-(limit - head - 3):]}"


def root_cause(exc: BaseException) -> str:
    """The innermost meaningful exception of exc as one line "<Class>: <message>".

    Follows Python's explicit causes (`raise ... from`), pyspark's captured exceptions
    (their description and JVM stack trace), py4j's Py4JJavaError (its Java stack trace with
    the "Caused by:" chain) and Python worker tracebacks inside Java messages."""
    links: list[tuple[str, str]] = []
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:  # outermost first
        seen.add(id(current))
        links.extend(_links_of(current))
        current = current.__cause__
    return _pick(links)


def root_cause_of_text(class_name: str, text: str) -> str:
    """root_cause for an exception known by its class name and its text (str(exc), or a
    captured exception's description and stack trace)."""
    return _pick(_parse(class_name, text))


def _links_of(exc: BaseException) -> list[tuple[str, str]]:
    name = type(exc).__name__
    if hasattr(exc, "_desc") and hasattr(exc, "_stackTrace"):
        # pyspark's CapturedException: str() asks the JVM whether to append the stack trace;
        # its fields hold both without a JVM call.
        return _parse(name, f"{exc._desc or ''}\n{exc._stackTrace or ''}")
    try:
        text = str(exc)  # Py4JJavaError: asks the JVM for the Java stack trace
    except Exception:  # noqa: BLE001 - the JVM may be gone; say what we know
        text = repr(exc.args)
    return _parse(name, text)


def _parse(name: str, text: str) -> list[tuple[str, str]]:
    """(class, message) links found in an exception's text, outermost first."""
    if _TRACEBACK in text:
        return [(name, "")] + _python_links(text)
    links = [(name, text)]
    for i, line in enumerate(text.splitlines()):
        # Java's stack trace: "X: message" first (py4j prefixes ": "), then "Caused by: Y: ...".
        if i == 0 or line.startswith((": ", "Caused by: ")):
            match = _JAVA_HEAD.match(line)
            if match:
                links.append((match.group(1), match.group(2)))
    return links


def _python_links(text: str) -> list[tuple[str, str]]:
    """The exceptions of the first Python traceback chain in text, outermost first.

    The first traceback found is the deepest: a Java exception caused by a Python worker
    carries the worker's traceback, and the Java chain above it only wraps it."""
    start = text.index(_TRACEBACK)
    tail = text[start:]
    # The traceback ends where Java's stack trace or pyspark's appendix begins.
    end = re.search(r"\n\s*at [\w$.<>]+\(|\nJVM stacktrace:", tail)
    tail = tail[:end.start()] if end else tail
    blocks = re.split(r"\n\s*\n(?=The above exception|During handling)", tail)
    links, direct = [], True
    for block in reversed(blocks):  # the last block is the exception that propagated
        if not direct:
            break
        direct = False
        lines = block.splitlines()
        if lines and lines[0].startswith(_DIRECT_CAUSE):
            direct = True
        exception = _exception_of_block(lines)
        if exception:
            links.append(exception)
    return links


def _exception_of_block(lines: list[str]) -> tuple[str, str] | None:
    """The exception line of one traceback: the first unindented line after the frames."""
    in_frames = False
    for i, line in enumerate(lines):
        if line.startswith(_TRACEBACK):
            in_frames = True
            continue
        if in_frames and line and not line[0].isspace():
            name, _, message = line.partition(": ")
            if " " in name.strip():  # not "module.Class: message"
                continue
            for more in lines[i + 1:]:  # a message of several lines ends at a blank line
                if not more.strip():
                    break
                message += "\n" + more
            return name.strip(), message
    return None


def _pick(links: list[tuple[str, str]]) -> str:
    """The innermost link that says something; wrappers only when nothing else does."""
    expanded = []
    for name, message in links:
        expanded.append((name, message))
        inner = _COPY_READ.search(message.splitlines()[0] if message else "")
        if inner:  # "COPY from stdin failed: error in .read() call: KafkaException ...": the inner one
            expanded.append((inner.group(1), inner.group(2)))
    for name, message in reversed(expanded):
        short = name.rsplit(".", 1)[-1]
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        if lines and short not in _WRAPPERS:
            # psycopg2 adds lines that locate the problem (CONTEXT: COPY stg_..., line 5): keep those.
            where = [line for line in lines[1:] if line.startswith(("CONTEXT:", "DETAIL:", "HINT:"))]
            return one_line(" ".join([f"{short}: {lines[0]}", *where]))
    name, message = links[0] if links else ("Exception", "")
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    return one_line(f"{name.rsplit('.', 1)[-1]}: {first}" if first else name.rsplit(".", 1)[-1])
