"""Deterministic names derived from a load: its id, Postgres gid, staging and Kafka ids.

The load id is a pure function of (pipeline, run id): every retry of every task of one
DAG run derives the same id, and the id names the run it came from.
"""

from __future__ import annotations

import hashlib
import re

_PIPELINE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
GID_PREFIX = "twophase:"
COPY_ID_PREFIX = "twophase-copy-"
STAGING_SCHEMA = "twophase_staging"
# The advisory lock (pg_advisory_*lock(hashtext(...))) under which every process creates
# schemas and tables on a server: two that find one missing at once would both create it,
# and the second fail on the catalog's unique index, IF NOT EXISTS or not.
CREATING_LOCK = "twophase.schema"


def digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def load_id_for(pipeline: str, run_id: str) -> str:
    """`<pipeline>.<readable run id>.<hash>`: unique per (pipeline, run id), at most 150 chars."""
    if not _PIPELINE.match(pipeline):
        raise ValueError(f"pipeline name {pipeline!r} must be 1-64 characters of letters, digits, '_', '.', '-'")
    if not run_id:
        raise ValueError("run id must not be empty")
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_id).strip("-")[:72]
    return f"{pipeline}.{readable}.{digest(pipeline + chr(0) + run_id, 10)}"


def of_pipeline(load_id: str | None, pipeline: str | None) -> bool:
    """Whether the load id was derived for `pipeline` (any load when pipeline is None): ids
    begin with the pipeline's name and a dot. Recovery of one pipeline sweeps only its own
    orphans with it (a pipeline named like another's prefix, `a` beside `a.b`, also claims
    the other's orphans: orphans of unknown loads, which either may discard)."""
    return pipeline is None or (load_id or "").startswith(pipeline + ".")


def attempt_tag(attempt: int) -> str:
    """What names of a prepare attempt's staging add to the load's: nothing for the first
    attempt (the names loads had before attempts were fenced), `a<n>` for a retry."""
    if not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"a prepare attempt is a number from 1, got {attempt!r}")
    return "" if attempt == 1 else f"a{attempt}"


def pg_gid(load_id: str, participant: str = "postgres", attempt: int = 1) -> str:
    """Global id of the load's prepared transaction in one database (Postgres allows 200
    bytes, unique per server: two databases of one server need two; two prepare attempts
    of one load too). The default participant's first is `twophase:<load id>`, as before
    several databases were possible."""
    suffix = "" if participant == "postgres" else f":{digest(participant, 8)}"
    tag = attempt_tag(attempt)
    return GID_PREFIX + load_id + suffix + (f":{tag}" if tag else "")


def load_id_of_gid(gid: str) -> str | None:
    """The load id inside a gid (load ids never hold ':')."""
    return gid[len(GID_PREFIX):].split(":")[0] if gid.startswith(GID_PREFIX) else None


def staging_table(load_id: str, table: str = "", attempt: int = 1) -> str:
    """Unqualified name of a Postgres staging table of the load and prepare attempt, in
    schema STAGING_SCHEMA: the first table's of the first attempt is named by the load id
    alone (as before a load had several)."""
    tag = attempt_tag(attempt)
    return f"stg_{digest(load_id + (chr(0) + table if table else '') + (chr(0) + tag if tag else ''), 24)}"


def copy_transactional_id(load_id: str) -> str:
    """transactional.id (and consumer group) of the load's Kafka commit copy."""
    return COPY_ID_PREFIX + load_id
