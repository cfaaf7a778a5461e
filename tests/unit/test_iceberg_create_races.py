"""Two loads creating one Iceberg namespace or table at once: the catalog checks, then
inserts, so the second insert fails (a SQL catalog's unique violation, as CI met it).
The load that loses takes what the other made; an error with nothing made stays its own."""

from __future__ import annotations

import pytest
from pyiceberg.exceptions import NoSuchTableError

from twophase.participants.iceberg.catalog import load_table
from twophase.participants.iceberg.target import IcebergTarget

TARGET = IcebergTarget("core_tests.t_raced", columns={"customer_id": "string"})


class Raced(Exception):
    """What the second insert raises (sqlalchemy's IntegrityError, for a SQL catalog)."""


class Catalog:
    """A catalog where another load made the namespace and the table just before this one
    (`made`), or where nothing was made and the insert failed for its own reason."""

    def __init__(self, made: bool):
        self.made, self.loads = made, 0

    def load_table(self, identifier):
        self.loads += 1
        if self.loads == 1:
            raise NoSuchTableError(identifier)  # not there when the load looked
        return "the other load's table"

    def create_namespace_if_not_exists(self, namespace):
        raise Raced('duplicate key value violates unique constraint "iceberg_namespace_properties_pkey"')

    def namespace_exists(self, namespace):
        return self.made

    def create_table_if_not_exists(self, identifier, schema, partition_spec):
        raise Raced('duplicate key value violates unique constraint "iceberg_tables_pkey"')

    def table_exists(self, identifier):
        return self.made


def test_the_load_that_loses_the_race_takes_the_table_the_other_made():
    assert load_table(Catalog(made=True), TARGET) == "the other load's table"


def test_an_insert_that_fails_with_nothing_made_is_the_loads_error():
    with pytest.raises(Raced, match="iceberg_namespace_properties_pkey"):
        load_table(Catalog(made=False), TARGET)
