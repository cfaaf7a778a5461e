"""The audit: a load's rules measured on its staged data, between prepare and vote.

limits.py (warn and error thresholds), staged.py (what a participant's staged rows
answer), rules.py (the kinds of rule), report.py (the report and its JSON schema); the
coordinator's `audit` step runs them (docs/audit.md).
"""

from .limits import ERROR, PASS, WARN, Bounds
from .report import AuditReport
from .rules import (AuditInput, DuplicateKeys, NullShare, PythonRule, RejectedShare, RowCount, RowCountChange, Rule, SqlRule, ValueRange)
from .staged import ArrowRows, NotMeasurable, StagedRows

__all__ = ["ERROR", "PASS", "WARN", "ArrowRows", "AuditInput", "AuditReport", "Bounds", "DuplicateKeys",
           "NotMeasurable", "NullShare", "PythonRule", "RejectedShare", "RowCount", "RowCountChange", "Rule",
           "SqlRule", "StagedRows", "ValueRange"]
