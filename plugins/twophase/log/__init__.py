"""The transaction log: one contract (contract.TransactionLog, with the rules that change
a load), two implementations (PostgresLog, the durable one; MemoryLog, for serverless
tests), what they return (records) and why they refuse (conflicts). tests/log runs one
suite against both."""

from .conflicts import DriverBusy, LeaseLost, StateConflict, Superseded, UnknownLoad
from .contract import TransactionLog
from .memory import MemoryLog
from .postgres import PostgresLog
from .records import Load, Transition
from .schema import MIGRATIONS, WRITER_GRANTS

__all__ = ["MIGRATIONS", "WRITER_GRANTS", "DriverBusy", "LeaseLost", "Load", "MemoryLog", "PostgresLog", "StateConflict", "Superseded",
           "Transition", "TransactionLog", "UnknownLoad"]
