"""Airflow plugin: the Transactions page (the two-phase transaction log) in Airflow's UI.

The only module of the page the plugin manager loads (plugins/.airflowignore skips the
twophase_ui package); plugins/ is on sys.path, hence the absolute import. The api-server
mounts the app under /twophase; the nav entry "Transactions" frames it (href relative to
the UI's base URL, so a base_url with a path works too).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from twophase_ui.app import app

URL_PREFIX = "/twophase"


class TwoPhaseTransactionsPlugin(AirflowPlugin):
    name = "twophase_transactions"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "twophase transactions"}]
    external_views = [{
        "name": "Transactions",
        "href": URL_PREFIX.lstrip("/") + "/",
        "url_route": "transactions",
        "destination": "nav",
        "nav_top_level": True,  # its own entry in the nav bar, not under "Plugins"
    }]
