"""docs/guide.md's pipeline is two files of at most forty lines, and the guide says how
many; its DAG file builds the DAG it describes (tests/pipeline/test_guide.py runs it)."""

from __future__ import annotations

import re

from airflow.dag_processing.dagbag import DagBag

from guide_blocks import GUIDE, code_lines, guide_files, write_project


def test_the_guides_pipeline_is_two_files_of_at_most_forty_lines():
    files = guide_files()
    assert set(files) == {"dags/page_views_hourly.py", "spark_jobs/page_views_hourly.py"}
    lines = sum(code_lines(text) for text in files.values())
    assert lines <= 40
    said = re.search(r"It is two files, (\d+) lines of code in all", GUIDE.read_text(encoding="utf-8"))
    assert said and int(said[1]) == lines, f"the guide says {said and said[1]}, the files have {lines} lines"


def test_the_guides_dag_file_builds_its_dag(tmp_path):
    bag = DagBag(dag_folder=str(write_project(tmp_path) / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags["page_views_hourly"]
    assert dag.get_task("begin").upstream_task_ids == {"wait_for_input"}
    assert [t.name for t in dag.get_task("commit").outlets] == [
        "postgres@twophase_reporting:web.page_views", "kafka:page-views", "iceberg:web.page_views"]
