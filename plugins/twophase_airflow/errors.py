"""The one place the core's errors become Airflow's retry or fail.

- errors.Terminal (a state conflict, a load aborted or violated, a wrong description, a
  busy interval): retrying cannot help, so the task fails at once (AirflowFailException),
  its message naming the load and what happened.
- errors.Transient (a server down, a live concurrent attempt, "retry later" from a
  participant): the task fails this try and Airflow retries it (its `retries`); the
  message is one line. A load left COMMITTING or ABORTING when the retries run out is
  finished by the twophase_recovery DAG.
Anything else passes unchanged (a bug: Airflow's retries apply, with its traceback).
"""

from __future__ import annotations

from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from twophase.errors import Terminal, Transient, one_line


class RetryTask(AirflowException):
    """Transient: this try failed; Airflow retries the task."""


@contextmanager
def airflow_outcome(step: str, load_id: str):
    """Run one core step of a load; map its errors (see the module docstring)."""
    try:
        yield
    except Terminal as exc:
        raise AirflowFailException(one_line(f"{step} of load {load_id}: {exc}", 1000)) from None
    except Transient as exc:
        raise RetryTask(one_line(f"{step} of load {load_id} must be retried: {exc}", 1000)) from None
