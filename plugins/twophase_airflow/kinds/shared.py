"""What the kinds' Airflow pieces share: the record each kind gives (AirflowKind), and the
checks and names every DAG-author target uses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from twophase.spec import SpecError


@dataclass(frozen=True)
class AirflowKind:
    """One kind of target in Airflow, the twin of its core record (twophase.participants.kinds).

    - target: the class a DAG author lists in LoadConfig(targets=[...]);
    - default_conn_id: the Airflow connection of a target that names none ('' = the
      transaction log's, as for tables);
    - conn_types: the Airflow connection types that are servers of this kind;
      any_conn_type: a connection of a type no kind lists is one of this kind (Kafka's
      have no type of their own: any connection whose extra has bootstrap.servers);
    - address(conn, conn_id): the core's address of a server from its Airflow connection,
      its secrets registered with Airflow's secrets masker;
    - secrets(address): the secrets in such an address (kept out of spark-submit's
      environment);
    - asset(name, conn_id): the Airflow Asset a commit emits for a target.
    """

    kind: str
    target: type
    default_conn_id: str
    conn_types: tuple[str, ...]
    address: Callable
    secrets: Callable[[str], set]
    asset: Callable
    any_conn_type: bool = False


def check_conn_id(target) -> None:
    if not isinstance(target.conn_id, str) or not target.conn_id.strip():
        raise SpecError(f"{type(target).__name__} {target.name!r} conn_id must name an Airflow connection, "
                        f"got {target.conn_id!r}")


def interval_value(interval: tuple) -> str:
    """The interval's start as its rows hold it: a date for a whole day (midnight to
    midnight), else the instant with its offset (an hour's rows hold the hour's start)."""
    start, end = interval
    if not isinstance(start, datetime):
        return start.isoformat()
    whole_day = (start.hour, start.minute, start.second, start.microsecond) == (0, 0, 0, 0) and \
        (end - start).total_seconds() == 86400
    return start.date().isoformat() if whole_day else start.isoformat()


def named_asset(caller: str, kind: str, name: str, conn_id: str, check, default_conn_id: str):
    """The Asset of `name` on connection `conn_id`, once `check(name)` (the core's rule)
    accepts it; its SpecError is raised naming `caller`. Identity must not depend on where
    a DAG file is parsed, so the URI names the Airflow connection (the server) and the
    object, in the project's own `x-twophase` scheme. Its name is `<kind>:<name>` on the
    kind's default connection, else `<kind>@<conn_id>:<name>` (as participants are named):
    Airflow keeps one active asset per name, so two tables of one name in two databases
    need two."""
    from airflow.sdk import Asset

    try:
        check(name)
    except SpecError as exc:
        raise SpecError(f"{caller}: {exc}") from None
    where = "" if conn_id == default_conn_id else f"@{conn_id}"
    return Asset(name=f"{kind}{where}:{name}", uri=f"x-twophase-{kind}://{conn_id}/{name}")
