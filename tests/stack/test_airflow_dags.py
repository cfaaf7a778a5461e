"""Airflow loads the project's dags/ folder with no import errors."""

from pathlib import Path

from airflow.dag_processing.dagbag import DagBag

DAGS = Path(__file__).parents[2] / "dags"


def test_dags_folder_imports_cleanly():
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}, f"DAG import errors: {bag.import_errors}"
    assert bag.dag_ids, "the dags/ folder holds no DAG at all"
