"""What the transaction log returns: a load's row (Load), one of its state changes
(Transition), and an operator's skip of a source's deleted records (Skip). Plain values:
changing one never changes the log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..protocol.states import State
from ..spec import LoadSpec


@dataclass(frozen=True)
class Load:
    load_id: str
    pipeline: str
    run_id: str
    state: State
    decision: str | None
    reason: str | None
    participants: dict
    input: dict
    expected_rows: int | None
    expected: dict | None       # per target (None: logged before targets had names)
    metrics: dict
    prepare_error: str | None
    data_interval_start: datetime | None
    data_interval_end: datetime | None
    began_at: datetime
    prepared_at: datetime | None
    decided_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    prepare_attempt: int = 0    # the latest prepare attempt claimed (0: none yet)
    exposed_at: datetime | None = None  # the vote began making participants ready (holding locks)
    audit: dict | None = None   # the audit's report (audit/report.schema.json); None: not audited
    approval: dict | None = None  # asked and answered (twophase/gates/approval.py); None: not asked
    outcomes: dict | None = None  # participant -> its commit's {kind, seconds, count}; None: not committed
    driver: str | None = None   # who drives the load's phase 2 now (TransactionLog.claim_driver)
    driver_until: datetime | None = None  # when that driver's lease ends unless renewed
    source: str | None = None   # its source's key (twophase.sources), when it has one
    source_range: dict | None = None  # what it reads of the source, fixed at begin (sources.Range as JSON)

    @property
    def dag_id(self) -> str | None:
        """The Airflow DAG that began the load (LoadSpec.dag_id; None: not begun by one)."""
        return self.participants.get("dag_id")

    @property
    def attempt(self) -> int:
        """The prepare attempt whose staging the load's vote, commit and rollback act on."""
        return max(1, self.prepare_attempt)

    @classmethod
    def from_row(cls, row: dict) -> "Load":
        return cls(**{**row, "state": State(row["state"])})

    def spec(self) -> LoadSpec:
        return LoadSpec.from_log(self.__dict__)


@dataclass(frozen=True)
class Transition:
    from_state: str | None
    to_state: str
    reason: str | None
    at: datetime


@dataclass(frozen=True)
class Skip:
    """Records of a source that no load can read any more (deleted by a retention before
    any load read them), passed over by an operator: the next load of the source starts
    after `source_range`, which says what was skipped (sources.Range as JSON)."""

    source: str
    source_range: dict
    by: str
    why: str
    at: datetime
