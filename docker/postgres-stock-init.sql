-- Run once by the postgres image of the stock server (docker-compose.yml's postgres-stock),
-- on an empty data directory, as the superuser. The same layout as the local stack's stock
-- cluster (scripts/localstack/postgres.py): a login role `twophase` (not a superuser)
-- owning its two databases. Names must match scripts/localstack/settings.py
-- (PIPELINE_ROLE, STOCK_DB, STOCK_REPORTS_DB); tests/test_docker_compose.py checks that
-- they do.
--
-- The password comes from the container's environment (TWOPHASE_PG_PASSWORD, set by
-- docker-compose.yml), never from this file. \getenv needs psql 15 or later.
\getenv twophase_password TWOPHASE_PG_PASSWORD

CREATE ROLE twophase LOGIN PASSWORD :'twophase_password';
CREATE DATABASE twophase_stock OWNER twophase;
CREATE DATABASE twophase_stock_reports OWNER twophase;
