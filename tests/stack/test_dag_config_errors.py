"""A DAG built from a wrong LoadConfig (or asset, or load_params) fails to import, and
Airflow's DAG import errors name the problem: names begin would refuse at run time are
refused when the file is parsed. Parsed by Airflow's own DagBag from a temporary folder."""

from __future__ import annotations

import textwrap

import pytest
from airflow.dag_processing.dagbag import DagBag

DAG_FILE = textwrap.dedent('''
    import pendulum
    from airflow.sdk import DAG

    from twophase.audit import NullShare, RowCount
    from twophase_airflow import IcebergTable, LoadConfig, Table, Topic, load_params, table_asset, topic_asset, two_phase_load
    from twophase_airflow import IntervalFolder, KafkaTopicSource, LandingFolder, WaitForInput
    from datetime import timedelta


    def describe_input(interval, params, load_id):
        return {{"path": f"/data/{{interval.day}}"}}


    with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), params={params}):
        two_phase_load({config}, application="spark_jobs/my_job.py")
''')

GOOD_TARGETS = ["Table('analytics.t')", "Topic('t', key_column='customer_id')"]


def config(targets=None, **fields) -> str:
    extra = "".join(f", {k}={v}" for k, v in fields.items())
    targets = GOOD_TARGETS if targets is None else targets
    return f"LoadConfig(targets=[{', '.join(targets)}], describe_input=describe_input{extra})"


def import_errors(tmp_path, dag_id="bad_config", params="load_params()", config_source=None) -> str:
    (tmp_path / "my_dag.py").write_text(DAG_FILE.format(dag_id=dag_id, params=params,
                                                        config=config_source or config()))
    bag = DagBag(dag_folder=str(tmp_path))
    return "\n".join(bag.import_errors.values())


def test_a_good_config_imports(tmp_path):
    bag_errors = import_errors(tmp_path)
    assert bag_errors == ""
    with_rules = config(rules="[RowCount('analytics.t', error=(1, None)), NullShare('t', 'customer_id')]")
    assert import_errors(tmp_path, config_source=with_rules) == ""


def test_a_config_of_two_tables_in_two_databases_two_topics_and_an_iceberg_table_imports(tmp_path):
    targets = ["Table('analytics.t')", "Table('analytics.s', frame='summary')",
               "Table('reporting.t', conn_id='reporting_postgres')", "Topic('t', key_column='customer_id')",
               "Topic('t2', key_column='customer_id', conn_id='kafka_two')",
               "IcebergTable('analytics.t', columns={'day': 'date', 'n': 'decimal(12, 2)'}, partition_by=('day',))"]
    assert import_errors(tmp_path, config_source=config(targets)) == ""


@pytest.mark.parametrize("targets, fields, message", [
    (["Table('analytics.t; drop table x')"], {},
     "SpecError: Table analytics.t; drop table x: postgres table 'analytics.t; drop table x' must be schema.table "
     "with plain identifiers"),
    (["Table('t')"], {}, "Table t: postgres table 't' must be schema.table with plain identifiers"),
    (["Topic('..', key_column='c')"], {}, "Topic '..': kafka topic '..' is a name Kafka refuses ('.' and '..' are "
                                          "not topic names)"),
    (["Topic('.', key_column='c')"], {}, "Topic '.': kafka topic '.' is a name Kafka refuses"),
    (["Topic('orders/2026', key_column='c')"], {},
     "Topic 'orders/2026': kafka topic 'orders/2026' has characters Kafka refuses in topic names: use only "
     "letters, digits, '.', '_' and '-'"),
    (["Topic('t' * 240, key_column='c')"], {},
     "is 240 characters long: its staging topic (the name plus '.twophase-staging') would exceed Kafka's limit of "
     "249; shorten the topic name to at most 232 characters"),
    (["Topic('t', key_column='customer id')"], {}, "Topic 't': kafka key_column 'customer id' must be a plain "
                                                   "identifier"),
    (["Table('analytics.t', interval_column='day; drop')"], {},
     "Table analytics.t: replace_where column 'day; drop' is not a plain identifier"),
    (["Topic('t', key_column='c', partitions=0)"], {}, "Topic 't': kafka partitions must be a whole number of at "
                                                       "least 1, got 0"),
    (["Table('analytics.t', conn_id='')"], {}, "Table 'analytics.t' conn_id must name an Airflow connection, got ''"),
    (["Table('analytics.t', frame='a b')"], {}, "frame 'a b' must be a name of letters, digits"),
    (["Table('analytics.t')", "Table('analytics.t')"], {},
     "LoadConfig targets name ['analytics.t'] more than once: each table and topic once"),
    ([], {}, "LoadConfig targets must list at least one Table(...), Topic(...) or IcebergTable(...)"),
    (["'analytics.t'"], {}, "LoadConfig targets must be Table(...), Topic(...) or IcebergTable(...), got 'analytics.t'"),
    (["IcebergTable('analytics.t', columns={'day': 'datetime'})"], {},
     "IcebergTable analytics.t: iceberg column 'day' has type 'datetime', which is not one of"),
    (["IcebergTable('analytics.t', partition_by=('day',))"], {},
     "IcebergTable analytics.t: iceberg table analytics.t: partition_by needs columns"),
    (GOOD_TARGETS, {"pipeline": "'my pipeline'"}, "LoadConfig pipeline: pipeline name 'my pipeline' must be 1-64 "
                                                  "characters"),
    (GOOD_TARGETS, {"log_conn_id": "''"}, "LoadConfig log_conn_id must name an Airflow connection, got ''"),
    (GOOD_TARGETS, {"rules": "[RowCount('analytics.nope', error=(1, None))]"},
     "audit rule row_count(analytics.nope) measures 'analytics.nope', which is not a target of this load (its "
     "targets: analytics.t, t)"),
    (GOOD_TARGETS, {"rules": "['row count']"}, "LoadConfig rules must be twophase.audit rules (RowCount, NullShare, "
                                               "...), got 'row count'"),
    (GOOD_TARGETS, {"rules": "[RowCount('t', warn=(1, None)), RowCount('t', error=(1, None))]"},
     "LoadConfig rules name ['row_count(t)'] more than once"),
    (GOOD_TARGETS, {"rules": "[RowCount('t')]"}, "audit rule row_count(t) has no thresholds: give it warn=(min, max), "
                                                 "error=(min, max) or both (without them it could never fail)"),
    (GOOD_TARGETS, {"rules": "[NullShare('t', 'c', warn=5)]"}, "thresholds are Bounds(min, max) or a (min, max) "
                                                               "pair, not 5"),
    (GOOD_TARGETS, {"quarantine_cap": "-1"}, "LoadConfig quarantine_cap must be 0 or more rows per rule, got -1"),
    (GOOD_TARGETS, {"source": "'orders-events'"}, "LoadConfig source must be a KafkaTopicSource(...), a "
                                                  "LandingFolder(...) or an IntervalFolder(...), got 'orders-events'"),
    (GOOD_TARGETS, {"source": "KafkaTopicSource('orders-events', start='yesterday')"},
     "Kafka source orders-events: start must be 'earliest' or an ISO timestamp with a time zone, got 'yesterday'"),
    (GOOD_TARGETS, {"source": "KafkaTopicSource('orders-events', cap=-5)"},
     "Kafka source orders-events: cap must be a whole number >= 0, got -5"),
    (GOOD_TARGETS, {"source": "KafkaTopicSource('orders-events', empty='maybe')"},
     "KafkaTopicSource empty must be one of skip, load, got 'maybe'"),
    (GOOD_TARGETS, {"source": "LandingFolder('')"}, "LandingFolder folder must be a storage URI or an absolute path"),
    (GOOD_TARGETS, {"source": "IntervalFolder('/data/orders')"},
     "IntervalFolder folder must be a function (interval) -> the interval's folder, got '/data/orders'"),
    (GOOD_TARGETS, {"source": "IntervalFolder(lambda i: '/data', wait=WaitForInput(timedelta(hours=1), then='wait'))"},
     "WaitForInput then must be one of fail, skip, got 'wait'"),
])
def test_a_wrong_load_config_is_an_import_error_naming_the_problem(tmp_path, targets, fields, message):
    errors = import_errors(tmp_path, config_source=config(targets, **fields))
    assert message in errors, errors[-2000:]


def test_a_config_with_a_source_needs_no_describe_input_and_one_without_needs_it(tmp_path):
    sourced = f"LoadConfig(targets=[{', '.join(GOOD_TARGETS)}], source=KafkaTopicSource('orders-events'))"
    assert import_errors(tmp_path, config_source=sourced) == ""
    neither = f"LoadConfig(targets=[{', '.join(GOOD_TARGETS)}])"
    needs = "LoadConfig needs a source (KafkaTopicSource, LandingFolder, IntervalFolder) or describe_input"
    assert needs in import_errors(tmp_path, config_source=neither)


def test_a_dag_id_that_cannot_name_the_pipeline_is_an_import_error(tmp_path):
    errors = import_errors(tmp_path, dag_id="a" * 65)
    assert f"pipeline name (the DAG id {'a' * 65!r} unless LoadConfig.pipeline is set)" in errors, errors[-2000:]
    assert "must be 1-64 characters of letters, digits, '_', '.', '-'" in errors


def test_a_bad_mode_in_load_params_is_an_import_error(tmp_path):
    errors = import_errors(tmp_path, params="load_params(mode='upsert')")
    assert "load_params mode 'upsert' is not one of append, replace" in errors, errors[-2000:]


def test_load_params_leaves_the_day_out_for_a_pipeline_whose_interval_is_not_a_day(tmp_path):
    """The hourly example's form: no Data date (begin then refuses a `date` key), and the
    mode speaks of the run's interval; its DAG imports."""
    from twophase_airflow import load_params

    hourly, daily = load_params(pick_day=False), load_params()
    assert set(daily) - set(hourly) == {"date"}
    assert hourly["mode"].description.startswith("append: load the interval once (a committed interval is not")
    assert daily["mode"].description.startswith("append: load the day once (a committed day is not")
    assert import_errors(tmp_path, params="load_params(pick_day=False)") == ""


@pytest.mark.parametrize("asset, message", [
    ("table_asset('analytics')", "table_asset: postgres table 'analytics' must be schema.table with plain identifiers"),
    ("topic_asset('..')", "topic_asset: kafka topic '..' is a name Kafka refuses"),
])
def test_a_wrong_asset_name_is_an_import_error(tmp_path, asset, message):
    (tmp_path / "downstream.py").write_text(textwrap.dedent(f'''
        import pendulum
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.empty import EmptyOperator

        from twophase_airflow import table_asset, topic_asset

        with DAG("downstream_of_a_typo", schedule={asset}, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
            EmptyOperator(task_id="noop")
    '''))
    bag = DagBag(dag_folder=str(tmp_path))
    assert message in "\n".join(bag.import_errors.values()), bag.import_errors


def test_the_tasks_retry_delay_comes_from_the_environment_and_a_bad_one_fails_the_parse(tmp_path, monkeypatch):
    monkeypatch.setenv("TWOPHASE_RETRY_DELAY_S", "7.5")
    (tmp_path / "my_dag.py").write_text(DAG_FILE.format(dag_id="delay", params="load_params()", config=config()))
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    delays = {t.task_id: t.retry_delay.total_seconds() for t in bag.dags["delay"].tasks if t.retries}
    assert delays and set(delays.values()) == {7.5}, delays
    monkeypatch.setenv("TWOPHASE_RETRY_DELAY_S", "soon")
    assert "TWOPHASE_RETRY_DELAY_S must be a number of seconds (0 or more), not 'soon'" in import_errors(tmp_path)
