"""The Transactions page (plugins/twophase_ui) against the stack's real Postgres and Airflow.

Loads are made with the core: one PREPARED with both participants' votes (ended ABORTED
in the log at the end, so nothing stays in doubt) and one rolled back to ABORTED with a
reason full of HTML. Tokens are minted by Airflow's own auth manager with the stack's JWT secret.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from support import make_spec
from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.protocol.votes import Vote
from twophase.sources.files import FilesSource
from ui_auth import bearer, mint, require_jwt_secret, viewer_token
from ui_browser import LAPTOP, drawn

ROLLBACK_REASON = 'quality gate: <b>12%</b> of lines rejected & "too many" > 5%'
OPEN_RUN = "manual__2026-11-20T01:02:03.456789+00:00"
ABORTED_RUN = "scheduled__2026-11-19T00:00:00+00:00"


@pytest.fixture(scope="module")
def jwt_secret() -> None:
    require_jwt_secret()


@pytest.fixture(scope="module")
def pipeline() -> str:
    return f"ui_tests_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def loads(pg_dsn, kafka_bootstrap, pipeline):
    log = PostgresLog(pg_dsn)
    conns = Connections(pg_dsn, kafka_bootstrap)
    # Neither table nor topics are created: nothing is staged, so rollback has nothing to discard.
    target = {"table": f"ui_tests.{pipeline}", "topic": pipeline.replace("_", "-")}
    prepared = replace(make_spec(target, run_id=OPEN_RUN, pipeline=pipeline), last_resource="postgres",
                       last_resource_why="its server has max_prepared_transactions = 0")
    aborted = make_spec(target, run_id=ABORTED_RUN, pipeline=pipeline)
    coordinator.begin(log, aborted)
    coordinator.rollback(log, conns, aborted.load_id, reason=ROLLBACK_REASON)
    coordinator.begin(log, prepared)
    log.record_vote(prepared.load_id, Vote("postgres", True, 1234, {"gid": "twophase:" + prepared.load_id},
                                           counts={target["table"]: 1234}, summary="prepared: 1234 rows"))
    log.record_vote(prepared.load_id, Vote("kafka", True, 1234, {"ranges": {}, "attempts": ["a1"]},
                                           counts={target["topic"]: 1234}, summary="staged: 1234 records"))
    log.set_expected(prepared.load_id, {target["table"]: 1234, target["topic"]: 1234},
                     {"input_lines": 1300, "rejected_lines": 66})
    log.transition(prepared.load_id, State.PREPARED)
    yield {"prepared": prepared.load_id, "aborted": aborted.load_id, **target}
    # Its votes are made up and nothing was staged: the log alone ends it (a participant's
    # abort would read commit data only that participant writes).
    log.transition(prepared.load_id, State.ABORTING, reason="tests/ui: finished")
    log.transition(prepared.load_id, State.ABORTED)
    assert log.get(prepared.load_id).state == State.ABORTED


@pytest.fixture(scope="module")
def client(jwt_secret) -> TestClient:
    from twophase_ui.app import app

    return TestClient(app)


@pytest.fixture(scope="module")
def token(jwt_secret) -> str:
    return viewer_token()


def test_list_shows_loads_newest_first_with_states_reasons_counts(client, token, loads, pipeline):
    resp = client.get("/api/loads", params={"pipeline": pipeline}, headers=bearer(token))
    assert resp.status_code == 200, resp.text
    listed = resp.json()
    assert [s["load_id"] for s in listed] == [loads["prepared"], loads["aborted"]]  # newest first
    prepared, aborted = listed
    assert (prepared["state"], prepared["decision"], prepared["counts"]) == \
        ("PREPARED", None, {loads["table"]: 1234, loads["topic"]: 1234})
    assert prepared["votes"]["kafka"] == {"yes": True, "count": 1234, "counts": {loads["topic"]: 1234},
                                          "summary": "staged: 1234 records", "reason": ""}
    assert prepared["prepare_s"] is not None and prepared["vote_s"] is None
    assert (aborted["state"], aborted["decision"], aborted["reason"]) == ("ABORTED", "ABORT", ROLLBACK_REASON)
    assert aborted["counts"] == {} and aborted["votes"] == {}  # it never voted
    assert aborted["vote_s"] is None and aborted["phase2_s"] is not None  # decided before prepare: no vote phase
    assert aborted["dag_run_url"] == f"/dags/{pipeline}/runs/{ABORTED_RUN}"

    only_aborted = client.get("/api/loads", params={"pipeline": pipeline, "state": "ABORTED"},
                              headers=bearer(token)).json()
    assert [s["load_id"] for s in only_aborted] == [loads["aborted"]]
    assert client.get("/api/loads", params={"state": "BOGUS"}, headers=bearer(token)).status_code == 400
    assert len(client.get("/api/loads", params={"limit": 1}, headers=bearer(token)).json()) == 1


def test_html_list_escapes_and_links_the_dag_run(client, token, loads, pipeline):
    client.cookies.set("_token", token)  # the cookie the Airflow UI holds after login
    try:
        resp = client.get("/", params={"pipeline": pipeline})
    finally:
        client.cookies.clear()
    assert resp.status_code == 200, resp.text
    page = resp.text
    assert page.index(loads["prepared"]) < page.index(loads["aborted"])
    assert "quality gate: &lt;b&gt;12%&lt;/b&gt; of lines rejected &amp; &quot;too many&quot; &gt; 5%" in page
    assert "<b>12%</b>" not in page
    assert f'href="/dags/{pipeline}/runs/{OPEN_RUN}"' in page
    assert f'href="/loads/{loads["aborted"]}"' in page
    rows = re.findall(r"<tr[ >].*?</tr>", page)
    prepared_row = next(r for r in rows if loads["prepared"] in r)
    aborted_row = next(r for r in rows if loads["aborted"] in r)
    assert "PREPARED" in prepared_row and "1,234" in prepared_row
    # one pipeline on the page: a column per target, named in the header
    headers = page.replace("<wbr>", "")  # a target's name may wrap after '.', '_' and '-'
    assert f'<th class="target">{loads["table"]}</th>' in headers and f'<th class="target">{loads["topic"]}</th>' in headers
    assert prepared_row.count('<td class="num">1,234</td>') == 2
    assert "ABORTED" in aborted_row and "ABORT" in aborted_row


def test_detail_page_shows_votes_history_metrics(client, token, loads, pipeline):
    page = client.get(f"/loads/{loads['aborted']}", headers=bearer(token))
    assert page.status_code == 200, page.text
    history = re.findall(r"<tr><td>([^<]*)</td><td><span class=\"state \w+\">(\w+)</span></td><td>([^<]*)</td>",
                         page.text)
    assert history == [("-", "PREPARING", ""),
                       ("PREPARING", "ABORTING", "quality gate: &lt;b&gt;12%&lt;/b&gt; of lines rejected &amp; "
                                                 "&quot;too many&quot; &gt; 5%"),
                       ("ABORTING", "ABORTED", "")]

    prepared = client.get(f"/loads/{loads['prepared']}", headers=bearer(token)).text
    assert "<td>postgres</td>" in prepared and "<td>kafka</td>" in prepared and 'class="yes"' in prepared
    assert f'<span class="target">{loads["table"]}</span> 1,234' in prepared  # staged, per target
    assert "staged: 1234 records" in prepared  # the vote's summary
    assert "&quot;input_lines&quot;: 1300" in prepared  # metrics
    assert f"/dags/{pipeline}/runs/{OPEN_RUN}" in prepared
    assert ("postgres commits last, without a prepared transaction (its server has max_prepared_transactions = 0)"
            in prepared)
    assert "every participant prepares" in page.text

    detail = client.get(f"/api/loads/{loads['prepared']}", headers=bearer(token)).json()
    assert detail["votes"]["postgres"]["count"] == 1234 and detail["votes"]["kafka"]["yes"] is True
    assert [(t["from_state"], t["to_state"]) for t in detail["history"]] == [(None, "PREPARING"),
                                                                             ("PREPARING", "PREPARED")]
    assert detail["metrics"] == {"input_lines": 1300, "rejected_lines": 66} and detail["prepare_error"] is None

    missing = client.get("/loads/no-such-load", headers=bearer(token))
    assert missing.status_code == 404 and "no-such-load" in missing.text


def test_the_lists_filters_are_in_its_address_so_a_view_can_be_shared(client, token, loads, pipeline):
    client.cookies.set("_token", token)
    try:
        page = client.get("/", params={"pipeline": pipeline, "state": "ABORTED", "limit": 7}).text
    finally:
        client.cookies.clear()
    assert '<form class="filters" method="get">' in page  # submitting it puts the filters in the address
    assert f'<option value="{pipeline}" selected>' in page and '<option value="ABORTED" selected>' in page
    assert 'name="limit" min="1" value="7"' in page
    assert loads["aborted"] in page and loads["prepared"] not in page


@pytest.mark.parametrize("view", ["every pipeline", "one pipeline"])
def test_the_list_fits_a_laptop_screen_without_scrolling_sideways(client, token, loads, pipeline, view):
    """Its widest content, a reason of a rollback, wraps within its column (at most three
    lines; the whole of it on the load's page), and every column, Reason last, is on the
    screen. Drawn by the stack's Chromium; the screenshot is kept in test-artifacts/ui."""
    client.cookies.set("_token", token)
    try:
        html = client.get("/", params={"pipeline": pipeline} if view == "one pipeline" else {}).text
    finally:
        client.cookies.clear()
    assert loads["aborted"] in html, "the rolled back load, with its long reason, is on the page"
    with drawn(html, f"transactions-list-{view.replace(' ', '-')}-1366.png", full_page=False) as page:
        wide = page.evaluate("document.documentElement.scrollWidth")
        reason = page.locator("th", has_text="Reason").bounding_box()
    assert wide <= LAPTOP["width"], f"the list is {wide} px wide on a {LAPTOP['width']} px screen"
    assert reason["x"] + reason["width"] <= LAPTOP["width"], reason


@pytest.mark.parametrize("path", ["/", "/api/loads", "/loads/anything", "/api/loads/anything"])
def test_anonymous_is_refused(client, path):
    resp = client.get(path)
    assert resp.status_code == 401
    assert "Transactions" not in resp.text and "load_id" not in resp.text


def test_anonymous_html_gets_a_login_link(client):
    resp = client.get("/")
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
    assert 'href="/auth/login?next=%2F"' in resp.text


def test_bad_tokens_are_refused(client, loads):
    from airflow.api_fastapi.auth.tokens import JWTGenerator

    forged = JWTGenerator(secret_key="not-the-configured-secret" * 3, valid_for=600, audience="apache-airflow",
                          algorithm="HS512").generate({"sub": "admin", "role": "admin"})
    expired = mint("admin", expiration_time_in_seconds=-3600)
    for bad in ("garbage", forged, expired):
        assert client.get("/api/loads", headers=bearer(bad)).status_code == 401
        client.cookies.set("_token", bad)
        try:
            assert client.get("/").status_code == 401
        finally:
            client.cookies.clear()


def test_valid_token_without_a_role_is_forbidden(client):
    resp = client.get("/api/loads", headers=bearer(mint(role=None)))
    assert resp.status_code == 403 and "may not read DAG runs" in resp.json()["detail"]


def test_airflow_loads_the_plugin_and_mounts_the_page(monkeypatch, tmp_path, token, loads, pipeline):
    """The plugin manager loads plugins/twophase_ui_plugin.py without errors, with the app
    and the nav entry; Airflow's own api-server app serves the page at /twophase, to a
    logged-in user only."""
    # create_app initializes the auth manager, which writes (and prints) a generated password
    # for every configured user that has none: a throwaway file, not the stack's login.
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(tmp_path / "passwords.json"))
    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app

    import twophase_ui.app

    plugins_manager.ensure_plugins_loaded()
    assert plugins_manager.get_import_errors() == {}
    [info] = [p for p in plugins_manager.get_plugin_info(["fastapi_apps", "external_views", "source"])
              if p["name"] == "twophase_transactions"]
    assert str(info["source"]).endswith("twophase_ui_plugin.py")
    apps, _middlewares = plugins_manager.get_fastapi_plugins()
    assert [a["url_prefix"] for a in apps if a["app"] is twophase_ui.app.app] == ["/twophase"]
    assert info["external_views"] == [{"name": "Transactions", "href": "twophase/", "url_route": "transactions",
                                       "destination": "nav", "nav_top_level": True}]

    api = TestClient(create_app(apps="core"))
    assert api.get("/twophase/").status_code == 401
    assert api.get("/twophase/api/loads").status_code == 401
    served = api.get("/twophase/", headers=bearer(token))
    assert served.status_code == 200 and loads["aborted"] in served.text
    assert f'href="/twophase/loads/{loads["aborted"]}"' in served.text  # links carry the mount prefix
    assert f'href="/twophase/pipelines/{pipeline}"' in served.text  # the pipeline column links its page
    pipeline_page = api.get(f"/twophase/pipelines/{pipeline}", headers=bearer(token))
    assert pipeline_page.status_code == 200 and f'href="/twophase/loads/{loads["prepared"]}"' in pipeline_page.text
    assert api.get(f"/twophase/pipelines/{pipeline}").status_code == 401
    views = api.get("/api/v2/plugins", headers=bearer(mint("admin"))).json()["plugins"]
    [ours] = [p for p in views if p["name"] == "twophase_transactions"]
    assert ours["external_views"][0]["name"] == "Transactions"


def test_detail_page_shows_what_a_load_reads_of_its_source(client, token, pg_dsn, kafka_bootstrap, pipeline,
                                                           tmp_path):
    """A load of a landing folder, capped at one file: the page names the source and the
    range begin fixed (the file it reads, and the hidden one it does not), as `show` does,
    and the file the cap left for the next load (the lag at begin)."""
    (tmp_path / "orders-1.jsonl").write_text('{"order_id": "o1"}\n')
    (tmp_path / "orders-2.jsonl").write_text('{"order_id": "o2"}\n')
    (tmp_path / "_orders-3.jsonl.tmp").write_text("still being written")
    log, conns = PostgresLog(pg_dsn), Connections(pg_dsn, kafka_bootstrap)
    source = FilesSource(str(tmp_path), cap=1)
    sourced = f"{pipeline}_sourced"  # not the other tests' pipeline, whose list they count
    spec = replace(make_spec({"table": f"ui_tests.{sourced}", "topic": sourced.replace("_", "-")},
                             run_id=OPEN_RUN, pipeline=sourced), source=source)
    coordinator.begin(log, spec, conns)
    try:
        page = client.get(f"/loads/{spec.load_id}", headers=bearer(token)).text
        assert f"<dt>Source</dt><dd>files:{tmp_path}: 1 file(s), 19 bytes; 1 not read" in page
        assert "Source range" in page and "orders-1.jsonl" in page and "_orders-3.jsonl.tmp" in page
        assert "<dt>Source lag at begin</dt><dd>1 file(s) after its range when begin fixed it (" in page
        detail = client.get(f"/api/loads/{spec.load_id}", headers=bearer(token)).json()
        assert detail["source"] == source.key and detail["source_range"]["records"] == 1
    finally:
        coordinator.rollback(log, conns, spec.load_id, reason="tests/ui: finished")
