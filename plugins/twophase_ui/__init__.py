"""The Transactions page: the transaction log in Airflow's UI (see twophase_ui_plugin.py).

A package, not a plugin module: plugins/.airflowignore keeps the plugin manager from
loading its modules one by one; plugins/twophase_ui_plugin.py registers the app.
"""
