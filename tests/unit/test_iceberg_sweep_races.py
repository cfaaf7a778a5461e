"""Recovery's sweep of an Iceberg catalog meets tables being dropped: a purge deletes the
catalog's row, then the table's files, so a table listed before the purge can have no
metadata file when the sweep loads it. Such a table has nothing left to sweep and the
sweep goes on; a table still listed whose metadata file is missing stops it, loudly."""

from __future__ import annotations

import pytest
from pyiceberg.exceptions import NoSuchTableError

from twophase.participants.iceberg import participant

GONE = ("core_tests", "t_dropped")


class Catalog:
    """Lists one table; loading it finds no metadata file (or no row), as a purge midway
    leaves it. `still_listed`: the row is still there afterwards."""

    def __init__(self, error: Exception, still_listed: bool):
        self.error, self.still_listed, self.listings = error, still_listed, 0

    def list_namespaces(self):
        return [("core_tests",)]

    def list_tables(self, namespace):
        self.listings += 1
        return [GONE] if self.listings == 1 or self.still_listed else []

    def load_table(self, identifier):
        raise self.error


@pytest.mark.parametrize("error", [FileNotFoundError(2, "Failed to open local file '.../00000-x.metadata.json'"),
                                   NoSuchTableError("Table does not exist: core_tests.t_dropped")],
                         ids=["metadata file gone", "row gone"])
def test_a_table_dropped_while_the_sweep_reads_it_is_passed_over(monkeypatch, error):
    monkeypatch.setattr(participant, "catalog_of", lambda _: Catalog(error, still_listed=False))
    assert participant.IcebergParticipant.sweep("the catalog", lambda ids: {}) == []


def test_a_table_still_listed_without_its_metadata_file_stops_the_sweep(monkeypatch):
    monkeypatch.setattr(participant, "catalog_of", lambda _: Catalog(FileNotFoundError(2, "no metadata"), True))
    with pytest.raises(FileNotFoundError, match="no metadata"):
        participant.IcebergParticipant.sweep("the catalog", lambda ids: {})
