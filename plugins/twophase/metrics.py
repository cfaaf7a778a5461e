"""The job's metrics: the figures a prepare job hands over with its rows (Output.metrics),
logged with the load. The product reads some of them; the job may add any others of its
own (any JSON value), which are logged and shown as they are.

What the product reads, and from where:

    input_lines         int >= 0   the input lines the job read: the whole of the rejected
                                   share (the vote's max_rejected_share gate, the audit's
                                   RejectedShare)
    rejected_lines      int >= 0   of those, the lines the job rejected (at most input_lines)
    rejected_by_reason  {reason: int >= 0}, adding up to rejected_lines: the rollback's log,
                                   the audit report, `show --rejected`
    skipped_files       int >= 0   non-empty input files the job did not read (the vote's
                                   max_skipped_files gate)
    skipped_bytes       int >= 0   their bytes
    skipped_paths       [{"path": str, "bytes": int, "why": str}], at most skipped_files of
                                   them: the gate's reason names the first

input_lines and rejected_lines come together (a share needs both). check() holds a job's
metrics to this when the job ends, before anything is staged, and names what is wrong: a
value of the wrong kind, figures that do not add up, one of the pair missing, a name one
letter off a name the product reads (a typo, a letter more or less, two swapped: it would
otherwise be read as missing, and a gate that counts skipped files would pass), or a value
the log cannot store.
"""

from __future__ import annotations

import json
import numbers
from typing import Mapping

from .errors import SpecError

COUNTS = ("input_lines", "rejected_lines", "skipped_files", "skipped_bytes")
READ = (*COUNTS, "rejected_by_reason", "skipped_paths")
PATH_KEYS = {"path": str, "bytes": int, "why": str}


def _one_off(a: str, b: str) -> bool:
    """Whether a is b with one letter changed, added or dropped, or two neighbours swapped."""
    if abs(len(a) - len(b)) > 1:
        return False
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return (a[i + 1:] == b[i + 1:] or a[i:] == b[i + 1:] or a[i + 1:] == b[i:]
            or (a[i:i + 2] == b[i:i + 2][::-1] and a[i + 2:] == b[i + 2:]))


def _count(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def problems(metrics: Mapping) -> list[str]:
    """What is wrong with `metrics` (see the module doc), each in a sentence; [] when none."""
    if not isinstance(metrics, Mapping):
        return [f"metrics must be a dict of names to values, not {type(metrics).__name__}"]
    found = []
    for name, value in metrics.items():
        if not isinstance(name, str):
            found.append(f"metric name {name!r} is not a string")
            continue
        near = [known for known in READ if name != known and _one_off(name, known)]
        if near:
            found.append(f"metric {name!r} is not one the product reads; did you mean {near[0]!r}?")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            found.append(f"metric {name!r} cannot be logged as JSON ({exc})")
    found += [f"metric {name!r} must be a whole number of 0 or more, not {metrics[name]!r}"
              for name in COUNTS if name in metrics and not _count(metrics[name])]
    if ("input_lines" in metrics) != ("rejected_lines" in metrics):
        have, missing = ("input_lines", "rejected_lines") if "input_lines" in metrics else ("rejected_lines",
                                                                                            "input_lines")
        found.append(f"metric {missing!r} is missing: {have!r} needs it (the rejected share is rejected_lines / "
                     "input_lines)")
    elif all(_count(metrics.get(n)) for n in ("input_lines", "rejected_lines")) \
            and metrics["rejected_lines"] > metrics["input_lines"]:
        found.append(f"metric 'rejected_lines' ({metrics['rejected_lines']}) is above 'input_lines' "
                     f"({metrics['input_lines']})")
    found += _by_reason(metrics)
    found += _paths(metrics)
    return found


def _by_reason(metrics: Mapping) -> list[str]:
    if "rejected_by_reason" not in metrics:
        return []
    by_reason = metrics["rejected_by_reason"]
    if not isinstance(by_reason, Mapping) or not all(isinstance(k, str) and _count(v) for k, v in by_reason.items()):
        return [f"metric 'rejected_by_reason' must map each reason (a string) to a whole number of lines, "
                f"not {by_reason!r}"]
    rejected = metrics.get("rejected_lines")
    if _count(rejected) and sum(by_reason.values()) != rejected:
        return [f"metric 'rejected_by_reason' adds up to {sum(by_reason.values())} lines, but 'rejected_lines' is "
                f"{rejected}"]
    return []


def _paths(metrics: Mapping) -> list[str]:
    if "skipped_paths" not in metrics:
        return []
    paths = metrics["skipped_paths"]
    good = isinstance(paths, list) and all(
        isinstance(p, Mapping) and set(p) == set(PATH_KEYS)
        and all(isinstance(p[k], kind) and not isinstance(p[k], bool) for k, kind in PATH_KEYS.items())
        for p in paths)
    if not good:
        return [f"metric 'skipped_paths' must be a list of {{'path': str, 'bytes': int, 'why': str}}, not {paths!r}"]
    skipped = metrics.get("skipped_files")
    if _count(skipped) and len(paths) > skipped:
        return [f"metric 'skipped_paths' lists {len(paths)} files, more than 'skipped_files' ({skipped})"]
    return []


def check(metrics: Mapping) -> None:
    """Raises SpecError naming every problem of `metrics` (problems)."""
    found = problems(metrics)
    if found:
        raise SpecError("the job's metrics break their contract (twophase/metrics.py): " + "; ".join(found))
