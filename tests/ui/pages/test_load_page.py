"""A load's page (/loads/{load_id}) over real loads on the stack (conftest.py): its timeline
drawn to scale from the log's timestamps, a card per target with what reached it, the
audit's rules, the rejected lines by reason, every chart's numbers in text, the raw JSON
folded; drawn by the stack's Chromium at 1366 px (screenshots in test-artifacts/ui)."""

from __future__ import annotations

from datetime import datetime

import pytest

from support import count_iceberg_rows, count_table_rows, iceberg_table
from twophase.log import PostgresLog
from twophase.participants.iceberg.catalog import committed_by
from twophase_ui.charts import TIMELINE_LABELS, TIMELINE_PLOT
from ui_auth import bearer
from ui_browser import LAPTOP, drawn
from ui_html import parse

KINDS = ("committed", "approved", "rolled_back", "stuck")  # decided: a vote and a phase 2 on the timeline


def _page(client, token, load_id: str) -> str:
    resp = client.get(f"/loads/{load_id}", headers=bearer(token))
    assert resp.status_code == 200, resp.text
    return resp.text


def _bars(html: str) -> dict[str, dict]:
    """The timeline's bars by "lane|label": x, width, start and end."""
    [svg] = parse(html).find_all("svg", class_="timeline")
    return {r.attrs["data-span"]: {"x": float(r.attrs["x"]), "width": float(r.attrs["width"]),
                                   "start": datetime.fromisoformat(r.attrs["data-start"]),
                                   "end": datetime.fromisoformat(r.attrs["data-end"]), "title": r.child("title").text()}
            for r in svg.find_all("rect", data_span=True)}


def _at(history, state: str) -> datetime:
    [at] = [t.at for t in history if t.to_state == state]
    return at


@pytest.mark.parametrize("kind", KINDS)
def test_the_timeline_is_drawn_to_scale_from_the_logs_timestamps(client, token, page_loads, pg_dsn, kind):
    log = PostgresLog(pg_dsn)
    load_id = page_loads[kind]
    load, history = log.get(load_id), log.history(load_id)
    bars = _bars(_page(client, token, load_id))
    began = _at(history, "PREPARING")
    prepared = _at(history, "PREPARED")
    decided = _at(history, "ABORTING" if kind == "rolled_back" else "COMMITTING")
    assert (bars["Load|prepare"]["start"], bars["Load|prepare"]["end"]) == (began, prepared)
    phase2 = bars["Load|rollback" if kind == "rolled_back" else "Load|commit"]
    assert phase2["start"] == decided and bars["Load|vote"]["end"] == decided
    # Scale: every bar's x and width follow its times on one axis. A finished load's axis
    # ends when it finished; a stuck one's at the page's now, so its scale is read from the
    # prepare bar (exactly began..prepared), whose width is rounded to 0.01 px: that rounding
    # grows along the axis by the plot's width over the bar's (a short prepare: a few px).
    per_second = bars["Load|prepare"]["width"] / (prepared - began).total_seconds()
    slack = 0.02 + 0.005 * TIMELINE_PLOT / bars["Load|prepare"]["width"]
    if kind != "stuck":
        finished = _at(history, "ABORTED" if kind == "rolled_back" else "COMMITTED")
        assert phase2["end"] == finished
        per_second, slack = TIMELINE_PLOT / (finished - began).total_seconds(), 0.02
    for name, bar in bars.items():
        assert bar["x"] == pytest.approx(TIMELINE_LABELS + (bar["start"] - began).total_seconds() * per_second,
                                         abs=slack), name
        seconds = (bar["end"] - bar["start"]).total_seconds()
        assert bar["width"] == pytest.approx(max(seconds * per_second, 2.0), abs=slack), name
    if load.exposed_at:
        assert bars["Exposure|exposure window"]["start"] == load.exposed_at
    if kind == "approved":
        wait = bars["Load|approval wait"]
        assert (wait["start"].isoformat(), wait["end"].isoformat()) == \
            (load.approval["asked_at"], load.approval["answered_at"])
    if kind == "committed":
        assert bars["Load|audit: pass"]["end"].isoformat() == load.audit["audited_at"]
        assert bars["postgres|prepared transaction"]["start"] == load.exposed_at
    if kind == "stuck":
        assert "so far" in phase2["title"], "a commit nobody drives is drawn up to now, and says so"


def test_a_card_per_target_says_what_reached_it_and_how(client, token, page_loads, pg_dsn):
    log = PostgresLog(pg_dsn)
    load_id = page_loads["committed"]
    votes, load = log.votes(load_id), log.get(load_id)
    cards = {c.find_all("h3")[0].text(): c for c in parse(_page(client, token, load_id)).find_all("section",
                                                                                                    class_="card")}
    table, topic, lake = page_loads["table"], page_loads["topic"], f"iceberg:{page_loads['lake']}"
    assert set(cards) == {"What the load read", table, topic, lake}
    facts = {name: dict(zip([d.text() for d in c.find_all("dt")], [d.text() for d in c.find_all("dd")]))
             for name, c in cards.items()}
    # what readers see on each target now, against the card's Visible
    assert count_table_rows(pg_dsn, table, load_id) == 200 and facts[table]["Visible"] == "200"
    assert count_iceberg_rows(page_loads["lake"], load_id) == 200 and facts[lake]["Visible"] == "200"
    assert facts[topic]["Visible"] == f"{load.outcomes['kafka']['count']:,}" == "200"
    for name in (table, topic, lake):
        assert facts[name]["Spark computed"] == "200" and facts[name]["Staged (vote)"] == "200 · yes"
    assert facts[table]["Prepared transaction"] == f"{votes['postgres'].committable['gid']} (COMMIT PREPARED)"
    [copy] = votes["kafka"].committable["topics"]
    assert facts[topic]["Staging topic"] == copy["staging_topic"]
    assert facts[topic]["Staged offsets"] == ", ".join(f"[{p}] {a:,}..{b:,}" for p, (a, b) in copy["ranges"].items())
    files = votes[f"iceberg:{page_loads['lake']}"].committable["files"]
    assert facts[lake]["Staged files"].startswith(f"{len(files)} Parquet files in ")
    [snapshot] = committed_by(iceberg_table(page_loads["lake"]), load_id)
    assert facts[lake]["Snapshot"] == f"{snapshot.snapshot_id}, the table's snapshot whose summary has " \
                                      f"twophase.load_id = {load_id}"

    rolled_back = {c.find_all("h3")[0].text(): c for c in parse(_page(client, token, page_loads["rolled_back"]))
                   .find_all("section", class_="card")}
    assert "0 (rolled back)" in rolled_back[table].text() and count_table_rows(pg_dsn, table,
                                                                                page_loads["rolled_back"]) == 0
    assert "Prepared transactionnone: the vote never made it ready" in rolled_back[table].text()  # the audit aborted


def test_a_load_waiting_for_approval_waits_up_to_now(client, token, page_loads, pg_dsn):
    load = PostgresLog(pg_dsn).get(page_loads["waiting"])
    bars = _bars(_page(client, token, load.load_id))
    assert sorted(b for b in bars if b.startswith("Load|")) == ["Load|approval wait", "Load|prepare"], "no vote yet"
    assert all(b.endswith("|staged") for b in bars if not b.startswith("Load|")), "no lock, no prepared transaction"
    wait = bars["Load|approval wait"]
    assert wait["start"].isoformat() == load.approval["asked_at"] and "so far" in wait["title"]
    assert "waiting for a person" in wait["title"]


def test_the_audits_rules_with_their_verdicts(client, token, page_loads):
    committed = parse(_page(client, token, page_loads["committed"]))
    rows = [[td.text() for td in tr.find_all("td")] for tr in committed.find_all("tr")
            if tr.find_all("td") and tr.find_all("span", class_="verdict-pass")]
    table = page_loads["table"]
    assert [(r[0], r[4]) for r in rows] == [(f"row_count({table})", "✓ pass"),
                                           (f"value_range({table}.orders in 1..1000)", "✓ pass")]
    rolled_back = _page(client, token, page_loads["rolled_back"])
    assert '<span class="verdict-error">✗ error</span>' in rolled_back
    assert "audit: error" in rolled_back  # its timeline's audit bar


def test_rejected_lines_by_reason_as_bars_with_the_first_lines(client, token, page_loads):
    doc = parse(_page(client, token, page_loads["committed"]))
    [svg] = doc.find_all("svg", class_="hbars")
    bars = {r.child("title").text().split(":")[0]: float(r.attrs["data-value"]) for r in svg.find_all("rect")}
    assert bars == page_loads["rejected_counts"]
    assert "not_json: 14 lines (6.4% of 220 input lines)" in [r.child("title").text() for r in svg.find_all("rect")]
    [table] = [t for t in doc.find_all("table") if "First lines kept" in t.text()]
    rows = {tr.find_all("td")[0].text(): tr for tr in table.find_all("tr") if tr.find_all("td")}
    assert [td.text() for td in rows["not_json"].find_all("td")[1:3]] == ["14", "4"]  # counted by the job, kept
    shown = [c.text() for c in rows["not_json"].find_all("code")]
    assert len(shown) == 3 and all(line in text for line, text in zip(page_loads["rejected"]["not_json"], shown))


@pytest.mark.parametrize("kind", KINDS + ("waiting",))
def test_every_chart_has_its_numbers_in_text_and_the_json_is_folded(client, token, page_loads, kind):
    html = _page(client, token, page_loads[kind])
    doc = parse(html)
    figures = doc.find_all("figure")
    assert figures, "the timeline at least"
    for figure in figures:
        assert figure.child("figcaption") is not None and figure.child("figcaption").text()
        [svg] = figure.find_all("svg")
        assert svg.attrs["role"] == "img" and any(ch.isdigit() for ch in svg.attrs["aria-label"])
        for mark in svg.find_all("rect", data_span=True) + svg.find_all("rect", data_value=True):
            assert any(ch.isdigit() for ch in mark.child("title").text()), mark.attrs
    bars = _bars(html)
    drawn_rows = [tr for tr in doc.find_all("table", class_="timeline-table")[0].find_all("tr") if tr.find_all("td")]
    assert len(drawn_rows) == len(bars)  # the timeline's table: a row per bar, with its times
    assert html.index("<pre") > html.index("<summary>Raw JSON"), "no JSON before the raw JSON, folded"


@pytest.mark.parametrize("kind", KINDS + ("waiting",))
def test_a_loads_page_reads_well_on_a_laptop(client, token, page_loads, kind):
    """Drawn by Chromium at 1366 px: nothing scrolls sideways, the timeline is on the first
    screen, every bar inside the drawing."""
    html = _page(client, token, page_loads[kind])
    with drawn(html, f"load-page-{kind.replace('_', '-')}-1366.png") as page:
        wide = page.evaluate("document.documentElement.scrollWidth")
        timeline = page.locator("svg.timeline").bounding_box()
        bars = page.locator("svg.timeline rect").evaluate_all(
            "rs => rs.map(r => { const b = r.getBoundingClientRect(); return [b.left, b.right]; })")
    assert wide <= LAPTOP["width"], f"the page is {wide} px wide on a {LAPTOP['width']} px screen"
    assert timeline["y"] < LAPTOP["height"] and timeline["x"] + timeline["width"] <= LAPTOP["width"]
    assert all(timeline["x"] <= left and right <= timeline["x"] + timeline["width"] + 0.5 for left, right in bars)
