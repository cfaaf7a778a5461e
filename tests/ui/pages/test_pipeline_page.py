"""A pipeline's page (/pipelines/{pipeline}) over real loads on the stack (conftest.py): its
newest loads charted against the log's figures, each state by a glyph as well as a
colour, the loads not finished with what resolves them, the lag behind a source (or why it
is unknown); drawn by the stack's Chromium at 1366 px (screenshot in test-artifacts/ui)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

import pytest

from support import make_spec
from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.ops.report import seconds
from twophase.protocol import coordinator
from twophase.sources.files import FilesSource
from twophase_ui import source_lag
from ui_auth import bearer
from ui_browser import LAPTOP, drawn
from ui_html import parse

ORDER = ("committed", "approved", "rolled_back", "stuck", "waiting")  # as begun: oldest first
GLYPH = {"committed": "✓", "approved": "✓", "rolled_back": "✗", "stuck": "…", "waiting": "…"}


def _page(client, token, pipeline: str, **params) -> str:
    resp = client.get(f"/pipelines/{pipeline}", params=params, headers=bearer(token))
    assert resp.status_code == 200, resp.text
    return resp.text


def _chart(doc, label_starts: str):
    [svg] = [s for s in doc.find_all("svg", class_="columns") if s.attrs["aria-label"].startswith(label_starts)]
    return svg


def _columns(svg) -> dict[str, dict]:
    """Each column by load id: its segments' values by series, its glyph."""
    found = {}
    for group in svg.find_all("a", data_load=True):
        values = {r.attrs["data-series"]: float(r.attrs["data-value"]) for r in group.find_all("rect")}
        [marker] = group.find_all("text", class_="marker")
        found[group.attrs["data-load"]] = {"values": values, "glyph": marker.children[0],
                                           "title": marker.child("title").text()}
    return found


def test_the_newest_loads_charted_from_the_log(client, token, page_loads, pg_dsn):
    log = PostgresLog(pg_dsn)
    doc = parse(_page(client, token, page_loads["pipeline"]))
    phases = _columns(_chart(doc, "Each phase's time"))
    assert list(phases) == [page_loads[k] for k in ORDER], "oldest left"
    for kind in ORDER:
        load = log.get(page_loads[kind])
        column = phases[load.load_id]
        expected = {"prepare": seconds(load.began_at, load.prepared_at), "vote": seconds(load.prepared_at,
                                                                                         load.decided_at),
                    "phase 2": seconds(load.decided_at, load.finished_at)}
        assert column["values"] == pytest.approx({k: v for k, v in expected.items() if v is not None}), kind
        assert column["glyph"] == GLYPH[kind] and load.state.value in column["title"], kind
    for target in (page_loads["table"], page_loads["topic"], f"iceberg:{page_loads['lake']}"):
        rows = _columns(_chart(doc, f"Rows staged for {target}"))
        assert {k: c["values"] for k, c in rows.items()} == {page_loads[k]: {target: 200.0} for k in ORDER}
    rejected = _columns(_chart(doc, "Rejected share"))
    assert rejected[page_loads["committed"]]["values"] == {"rejected share": pytest.approx(20 / 220)}
    assert all(not rejected[page_loads[k]]["values"] for k in ORDER[1:]), "no input counted: no share"


def test_every_chart_has_its_numbers_in_text(client, token, page_loads):
    doc = parse(_page(client, token, page_loads["pipeline"]))
    figures = doc.find_all("figure")
    assert len(figures) == 5  # phases, a target each, rejected share
    for figure in figures:
        assert figure.child("figcaption").text()
        [svg] = figure.find_all("svg")
        assert svg.attrs["role"] == "img" and svg.attrs["aria-label"]
        for mark in svg.find_all("rect", data_value=True):
            assert any(ch.isdigit() for ch in mark.child("title").text()), mark.attrs
    [table] = [t for t in doc.find_all("table") if "Prepare" in t.text() and "Rejected" in t.text()]
    rows = {tr.find_all("td")[1].text(): [td.text() for td in tr.find_all("td")] for tr in table.find_all("tr")
            if tr.find_all("td")}
    assert set(rows) == {page_loads[k] for k in ORDER}
    committed = rows[page_loads["committed"]]
    assert committed[2] == "✓ COMMITTED" and committed[-1] == "9.1%" and committed[6:9] == ["200", "200", "200"]
    assert rows[page_loads["rolled_back"]][2] == "✗ ABORTED"  # the state in words, with its glyph


def test_the_loads_not_finished_and_the_command_that_resolves_them(client, token, page_loads):
    doc = parse(_page(client, token, page_loads["pipeline"]))
    [table] = [t for t in doc.find_all("table") if "Waits for" in t.text()]
    rows = {tr.find_all("td")[0].text(): tr.find_all("td")[3].text() for tr in table.find_all("tr")
            if tr.find_all("td")}
    assert list(rows) == [page_loads["stuck"], page_loads["waiting"]]
    assert "nobody drives its commit: recovery re-drives it" in rows[page_loads["stuck"]]
    assert "waiting for approval since" in rows[page_loads["waiting"]]
    assert "answer it in Airflow" in rows[page_loads["waiting"]]
    [command] = doc.find_all("pre", class_="command")
    assert command.text() == f"python -m twophase_airflow recover --pipeline {page_loads['pipeline']}"


def test_the_lag_behind_a_source_or_why_it_is_unknown(client, token, pg_dsn, kafka_bootstrap, tmp_path, monkeypatch):
    """A landing folder of two files, a load capped at one begun: the source is two files
    ahead of the committed loads (none yet). Asked with no connections, or a source that
    does not answer in time, the lag is unknown and the page says why."""
    for i in (1, 2):
        (tmp_path / f"orders-{i}.jsonl").write_text(f'{{"order_id": "o{i}"}}\n')
    log, conns = PostgresLog(pg_dsn), Connections(pg_dsn, kafka_bootstrap)
    pipeline = f"ui_pages_lag_{uuid.uuid4().hex[:8]}"
    spec = replace(make_spec({"table": f"ui_tests.{pipeline}", "topic": pipeline.replace("_", "-")},
                             pipeline=pipeline), source=FilesSource(str(tmp_path), cap=1))
    coordinator.begin(log, spec, conns)
    try:
        doc = parse(_page(client, token, pipeline))
        [table] = [t for t in doc.find_all("table") if "Behind" in t.text()]
        [row] = [[td.text() for td in tr.find_all("td")] for tr in table.find_all("tr") if tr.find_all("td")]
        assert row == [spec.source.key, "2", "records, offsets or files no committed load read"]

        def no_connections():
            raise RuntimeError("no Airflow here")
        assert source_lag.lags(pg_dsn, [spec.source.key], no_connections) == {
            spec.source.key: "unknown: the connections to ask it with cannot be read (RuntimeError: no Airflow here)"}
        answer = threading.Event()
        monkeypatch.setattr(source_lag, "lag", lambda *args: answer.wait() and 0)  # a source that does not answer
        try:
            late = source_lag.lags(pg_dsn, [spec.source.key], lambda: conns, timeout_s=0.05)
        finally:
            answer.set()
        assert late == {spec.source.key: "unknown: the source did not answer within 0.05 s"}
    finally:
        coordinator.rollback(log, conns, spec.load_id, reason="tests/ui: finished")


def test_a_pipelines_page_reads_well_on_a_laptop(client, token, page_loads):
    html = _page(client, token, page_loads["pipeline"])
    with drawn(html, "pipeline-page-1366.png") as page:
        wide = page.evaluate("document.documentElement.scrollWidth")
        charts = page.locator("svg.columns").evaluate_all(
            "ss => ss.map(s => { const b = s.getBoundingClientRect(); return [b.left, b.right, b.height]; })")
    assert wide <= LAPTOP["width"], f"the page is {wide} px wide on a {LAPTOP['width']} px screen"
    assert charts and all(right <= LAPTOP["width"] and height > 40 for _, right, height in charts)
