"""What Airflow recorded about assets, read from its metadata database."""

from __future__ import annotations

from sqlalchemy import delete, select, update

DOWNSTREAM = "customer_totals_downstream"


def asset_events(run_id: str) -> dict[str, dict]:
    """{asset name: event extra} of the events a DAG run emitted."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.execute(select(AssetModel.name, AssetEvent.extra)
                               .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                               .where(AssetEvent.source_run_id == run_id)).all()
    return {name: extra for name, extra in rows}


def queued_assets(dag_id: str = DOWNSTREAM) -> set[str]:
    """Assets whose events wait to trigger a run of dag_id (the scheduler consumes them)."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return set(session.scalars(select(AssetModel.name).join(AssetDagRunQueue, AssetDagRunQueue.asset_id == AssetModel.id)
                                   .where(AssetDagRunQueue.target_dag_id == dag_id)))


def clear_queue(dag_id: str = DOWNSTREAM) -> None:
    """Empty dag_id's asset queue and unpause it: Airflow queues asset events only for a DAG
    that is not paused, and the stack's DAGs are paused at creation (run_dag registers new
    ones unpaused)."""
    from airflow.models.asset import AssetDagRunQueue
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.execute(delete(AssetDagRunQueue).where(AssetDagRunQueue.target_dag_id == dag_id))
        session.execute(update(DagModel).where(DagModel.dag_id == dag_id).values(is_paused=False))
