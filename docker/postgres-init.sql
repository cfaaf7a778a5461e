-- Run once by the postgres image, on an empty data directory, as the superuser.
-- The same layout as the local stack (scripts/localstack/postgres.py): a login role
-- `twophase` (not a superuser) owning the pipeline's database, the Iceberg catalog's
-- database and Airflow's metadata database. Names must match
-- scripts/localstack/settings.py (PIPELINE_ROLE, PIPELINE_DB, ICEBERG_DB, AIRFLOW_DB);
-- tests/test_docker_compose.py checks that they do.
--
-- The password comes from the container's environment (TWOPHASE_PG_PASSWORD, set by
-- docker-compose.yml), never from this file. \getenv needs psql 15 or later.
\getenv twophase_password TWOPHASE_PG_PASSWORD

CREATE ROLE twophase LOGIN PASSWORD :'twophase_password';
CREATE DATABASE twophase OWNER twophase;
CREATE DATABASE twophase_iceberg OWNER twophase;
CREATE DATABASE airflow OWNER twophase;
