"""How far a pipeline's sources are ahead of its committed loads, asked from the api-server.

The same figure as `python -m twophase status` (twophase.ops.show.lag, over the
connections the DAGs use), asked in a thread of a small pool and waited for at most
TIMEOUT_S: a source's server that is slow or down makes the page say why the lag is
unknown, never makes it hang or fail.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Timeout
from typing import Callable

from twophase.connections import Connections
from twophase.errors import root_cause
from twophase.log import PostgresLog
from twophase.ops.show import lag

TIMEOUT_S = 5.0
_ASKING = ThreadPoolExecutor(max_workers=4, thread_name_prefix="twophase-ui-lag")


def airflow_connections() -> Connections:
    """The connections the DAGs use (Airflow's), the log's being the page's."""
    from twophase_airflow.connections import from_airflow

    from .connection import CONN_ID

    return from_airflow(CONN_ID, lookup=True)


def lags(dsn: str, keys: list[str], connections: Callable[[], Connections] = airflow_connections,
         timeout_s: float = TIMEOUT_S) -> dict[str, int | str]:
    """{source key: how far it is ahead (records, offsets or files), or "unknown: why"}."""
    if not keys:
        return {}
    try:
        conns = connections()
    except Exception as exc:  # noqa: BLE001 - no connection to ask with: every lag is unknown, said once each
        return {key: f"unknown: the connections to ask it with cannot be read ({root_cause(exc)})" for key in keys}
    log = PostgresLog(dsn)
    asked = {key: _ASKING.submit(lag, log, conns, key) for key in keys}
    deadline = time.monotonic() + timeout_s
    found: dict[str, int | str] = {}
    for key, future in asked.items():
        try:
            found[key] = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except Timeout:
            found[key] = f"unknown: the source did not answer within {timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - the log's own server down while reading the source's loads
            found[key] = f"unknown: {root_cause(exc)}"
    return found
