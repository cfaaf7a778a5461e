"""docker-compose.yml and docker/ agree with scripts/localstack/settings.py (no servers needed).

Everything expected here is derived from settings.py (and requirements.txt), so changing a
value there without changing the compose file makes this test fail, naming what drifted.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from localstack import settings  # noqa: E402

COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
AIRFLOW_HOME = "/opt/airflow"

AIRFLOW_COMMANDS = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
AIRFLOW_INIT = "airflow-init"
AIRFLOW_SERVICES = (AIRFLOW_INIT, *AIRFLOW_COMMANDS)

CONNECTIONS = {
    settings.CONN_POSTGRES: "postgres",
    settings.CONN_STOCK: "postgres",
    settings.CONN_STOCK_REPORTS: "postgres",
    settings.CONN_KAFKA: "kafka",
    settings.CONN_SPARK: "spark",
    settings.CONN_ICEBERG: "iceberg",
}

# The Postgres services: the server settings of each, and the databases its init SQL
# creates for the pipeline's role.
POSTGRES_SERVICES = {
    "postgres": (settings.POSTGRES_SERVER_SETTINGS, (settings.PIPELINE_DB, settings.ICEBERG_DB, settings.AIRFLOW_DB)),
    "postgres-stock": (settings.POSTGRES_STOCK_SERVER_SETTINGS, (settings.STOCK_DB, settings.STOCK_REPORTS_DB)),
}
# The Postgres connections: service and database of each.
POSTGRES_CONNECTIONS = {
    settings.CONN_POSTGRES: ("postgres", settings.PIPELINE_DB),
    settings.CONN_STOCK: ("postgres-stock", settings.STOCK_DB),
    settings.CONN_STOCK_REPORTS: ("postgres-stock", settings.STOCK_REPORTS_DB),
}

# ${NAME?msg} / ${NAME:?msg}: compose refuses to start when NAME is unset, and the file
# holds no value. ${NAME:-default} would hold a literal default, so it does not count.
REQUIRED_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*):?\?[^}]*\}")
PG_URL = re.compile(
    r"^postgresql(\+\w+)?://(?P<user>[^:@/]+):(?P<password>\$\{[^}]+\})@(?P<host>[^:/]+)(:(?P<port>\d+))?/(?P<db>\w+)$"
)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def _environment(service: dict) -> dict[str, str]:
    """A service's environment as a str -> str mapping (compose allows a list or a mapping)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {key: _as_env_string(value) for key, value in env.items()}


def _as_env_string(value) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)


def _command(service: dict) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def _mounts(service: dict) -> dict[str, str]:
    """Bind mounts of a service: container path -> host path (resolved)."""
    mounts = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            source, target = volume.get("source", ""), volume["target"]
        else:
            source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts[target] = str((ROOT / source).resolve())
        else:
            mounts[target] = source  # a named volume
    return mounts


def _required_var(value: str | None, what: str) -> str:
    """The variable name of a ${NAME:?...} value; fails when the value is anything else."""
    match = REQUIRED_VAR.fullmatch(value or "")
    assert match, f"{what} must be a required ${{VAR:?...}} interpolation, not {value!r}"
    return match["name"]


def _kafka_env_name(key: str) -> str:
    """The apache/kafka image's env var for a server property: . -> _, _ -> __, - -> ___."""
    return "KAFKA_" + key.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, with continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, args = line.partition(" ")
            instructions.append((word.upper(), args.strip()))
    return instructions


def _pinned_airflow_version() -> str:
    match = re.search(r"^apache-airflow==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert match, "requirements.txt does not pin apache-airflow"
    return match[1]


# --- Airflow services and image -------------------------------------------------------------


def test_airflow_services_exist_and_build_from_the_dockerfile(services):
    for name in AIRFLOW_SERVICES:
        assert name in services, f"docker-compose.yml has no service {name}"
        build = services[name].get("build")
        assert build, f"{name} is not built from docker/Dockerfile (no build section)"
        if isinstance(build, str):
            build = {"context": build}
        context = (ROOT / build.get("context", ".")).resolve()
        dockerfile = (context / build.get("dockerfile", "Dockerfile")).resolve()
        assert dockerfile == DOCKERFILE, f"{name} builds from {dockerfile}, not {DOCKERFILE}"
        assert (context / "requirements.txt").is_file(), (
            f"{name}'s build context {context} has no requirements.txt for the Dockerfile to copy"
        )


def test_airflow_service_commands(services):
    for name, command in AIRFLOW_COMMANDS.items():
        assert _command(services[name]) == [command], (
            f"{name} runs {_command(services[name])}, expected [{command!r}]"
        )
    assert _command(services[AIRFLOW_INIT]) in (["db", "migrate"], ["airflow", "db", "migrate"]), (
        f"{AIRFLOW_INIT} runs {_command(services[AIRFLOW_INIT])}, not `airflow db migrate`"
    )


def test_dockerfile_extends_airflow_3_with_java_17_and_the_requirements():
    instructions = _dockerfile_instructions()
    froms = [args for word, args in instructions if word == "FROM"]
    assert froms, "docker/Dockerfile has no FROM"
    match = re.fullmatch(r"apache/airflow:(?P<version>3\.\d+\.\d+)(-python3\.\d+)?(\s+AS\s+\S+)?", froms[0], re.I)
    assert match, f"docker/Dockerfile's FROM is {froms[0]!r}, not an apache/airflow 3.x image"
    assert match["version"] == _pinned_airflow_version(), (
        f"docker/Dockerfile's base image is Airflow {match['version']}, "
        f"requirements.txt pins apache-airflow=={_pinned_airflow_version()}"
    )

    runs = [args for word, args in instructions if word == "RUN"]
    assert any(re.search(r"apt-get install\b.*\bopenjdk-17-jre-headless\b", run) for run in runs), (
        "docker/Dockerfile does not apt-get install openjdk-17-jre-headless"
    )
    envs = " ".join(args for word, args in instructions if word == "ENV")
    assert re.search(r"\bJAVA_HOME[= ]", envs), "docker/Dockerfile does not set JAVA_HOME"

    assert any(word in ("COPY", "ADD") and re.search(r"(^|\s)requirements\.txt\s", args)
               for word, args in instructions), "docker/Dockerfile does not copy requirements.txt in"
    user, pip_user = None, None
    for word, args in instructions:
        if word == "USER":
            user = args
        elif word == "RUN" and re.search(r"pip install\b.*-r\s+\S*requirements\.txt", args):
            pip_user = user
    assert pip_user is not None, "docker/Dockerfile does not `pip install -r requirements.txt`"
    assert pip_user == "airflow", f"docker/Dockerfile pip-installs the requirements as {pip_user!r}, not airflow"


def test_airflow_services_share_one_environment(services):
    first = AIRFLOW_SERVICES[0]
    reference = _environment(services[first])
    for name in AIRFLOW_SERVICES[1:]:
        env = _environment(services[name])
        differing = sorted(k for k in reference.keys() | env.keys() if reference.get(k) != env.get(k))
        assert not differing, f"{name}'s environment differs from {first}'s in {differing}"


def test_airflow_settings(services):
    env = _environment(services[AIRFLOW_INIT])
    assert env.get("AIRFLOW__CORE__EXECUTOR") == "LocalExecutor", (
        f"AIRFLOW__CORE__EXECUTOR is {env.get('AIRFLOW__CORE__EXECUTOR')!r}, not LocalExecutor"
    )
    assert (env.get("AIRFLOW__CORE__LOAD_EXAMPLES") or "").lower() == "false", (
        f"AIRFLOW__CORE__LOAD_EXAMPLES is {env.get('AIRFLOW__CORE__LOAD_EXAMPLES')!r}, not False"
    )
    assert env.get("AIRFLOW__API__BASE_URL"), "AIRFLOW__API__BASE_URL is not set"


def test_jwt_secret_is_one_required_interpolation(services):
    values = {name: _environment(services[name]).get("AIRFLOW__API_AUTH__JWT_SECRET") for name in AIRFLOW_SERVICES}
    missing = [name for name, value in values.items() if not value]
    assert not missing, f"AIRFLOW__API_AUTH__JWT_SECRET is not set in {missing}"
    assert len(set(values.values())) == 1, f"AIRFLOW__API_AUTH__JWT_SECRET differs between services: {values}"
    _required_var(values[AIRFLOW_INIT], "AIRFLOW__API_AUTH__JWT_SECRET")


def test_metadata_db_and_pipeline_dsn(services):
    env = _environment(services[AIRFLOW_INIT])
    password_var = _required_var(_environment(services["postgres"]).get("POSTGRES_PASSWORD"), "postgres POSTGRES_PASSWORD")
    for var, db in (("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", settings.AIRFLOW_DB),
                    ("TWOPHASE_PG_DSN", settings.PIPELINE_DB)):
        match = PG_URL.fullmatch(env.get(var) or "")
        assert match, f"{var} is {env.get(var)!r}: not a postgresql:// URL with a ${{VAR:?...}} password"
        assert match["user"] == settings.PIPELINE_ROLE, f"{var} logs in as {match['user']}, settings.py says {settings.PIPELINE_ROLE}"
        assert match["db"] == db, f"{var} uses database {match['db']}, settings.py says {db}"
        assert match["host"] == "postgres", f"{var} points at host {match['host']}, not the postgres service"
        assert _required_var(match["password"], f"{var}'s password") == password_var, (
            f"{var}'s password variable is not {password_var}, the one the postgres service uses"
        )


# --- connections -----------------------------------------------------------------------------


def test_connections_exist_with_the_right_type(services):
    for name in AIRFLOW_SERVICES:
        env = _environment(services[name])
        for conn_id, conn_type in CONNECTIONS.items():
            var = f"AIRFLOW_CONN_{conn_id.upper()}"
            assert env.get(var), f"{name} has no {var} (connection id {conn_id!r} of settings.py)"
            try:
                conn = json.loads(env[var])
            except json.JSONDecodeError as exc:
                pytest.fail(f"{name}'s {var} is not JSON: {exc}")
            assert conn.get("conn_type") == conn_type, (
                f"{name}'s {var} has conn_type {conn.get('conn_type')!r}, expected {conn_type!r}"
            )


@pytest.mark.parametrize("conn_id", POSTGRES_CONNECTIONS)
def test_postgres_connection_matches_settings(services, conn_id):
    service, db = POSTGRES_CONNECTIONS[conn_id]
    env = _environment(services[AIRFLOW_INIT])
    conn = json.loads(env[f"AIRFLOW_CONN_{conn_id.upper()}"])
    assert conn.get("login") == settings.PIPELINE_ROLE, (
        f"{conn_id} connection login is {conn.get('login')!r}, settings.py says {settings.PIPELINE_ROLE}"
    )
    assert conn.get("schema") == db, f"{conn_id} connection schema is {conn.get('schema')!r}, settings.py says {db}"
    assert conn.get("host") == service, f"{conn_id} connection host is {conn.get('host')!r}, not the {service} service"
    password = _environment(services[service]).get("POSTGRES_PASSWORD")
    password_var = _required_var(password, f"{service} POSTGRES_PASSWORD")
    assert _required_var(conn.get("password"), f"{conn_id} connection password") == password_var, (
        f"{conn_id} connection password is not ${{{password_var}}}, the one the {service} service uses"
    )


def test_spark_gets_the_kafka_connector_of_the_pinned_spark(services):
    """A job that reads a Kafka source needs spark-sql-kafka of the very Spark and Scala
    versions the image installs (requirements.txt's pyspark; Scala 2.13)."""
    pyspark = re.search(r"^pyspark==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)[1]
    conn = json.loads(_environment(services[AIRFLOW_INIT])[f"AIRFLOW_CONN_{settings.CONN_SPARK.upper()}"])
    packages = (conn.get("extra") or {}).get("spark.jars.packages", "")
    assert f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark}" in packages.split(","), packages


def test_kafka_clients_use_the_advertised_in_network_listener(services):
    env = _environment(services[AIRFLOW_INIT])
    conn = json.loads(env[f"AIRFLOW_CONN_{settings.CONN_KAFKA.upper()}"])
    bootstrap = (conn.get("extra") or {}).get("bootstrap.servers")
    assert bootstrap == env.get("TWOPHASE_KAFKA_BOOTSTRAP"), (
        f"kafka connection bootstrap.servers {bootstrap!r} != TWOPHASE_KAFKA_BOOTSTRAP {env.get('TWOPHASE_KAFKA_BOOTSTRAP')!r}"
    )
    advertised = _environment(services["kafka"]).get("KAFKA_ADVERTISED_LISTENERS") or ""
    endpoints = [listener.split("://", 1)[1] for listener in advertised.split(",") if "://" in listener]
    assert bootstrap in endpoints, f"Airflow bootstraps from {bootstrap!r}, kafka advertises {advertised!r}"


# --- mounts ----------------------------------------------------------------------------------


def test_project_folders_are_mounted(services):
    for name in AIRFLOW_SERVICES:
        mounts = _mounts(services[name])
        for folder in ("dags", "plugins", "spark_jobs"):
            target = f"{AIRFLOW_HOME}/{folder}"
            assert mounts.get(target) == str(ROOT / folder), (
                f"{name} mounts {mounts.get(target)!r} at {target}, expected ./{folder}"
            )
    env = _environment(services[AIRFLOW_INIT])
    assert env.get("AIRFLOW__CORE__DAGS_FOLDER") == f"{AIRFLOW_HOME}/dags", "AIRFLOW__CORE__DAGS_FOLDER is not the mounted dags folder"
    assert env.get("AIRFLOW__CORE__PLUGINS_FOLDER") == f"{AIRFLOW_HOME}/plugins", "AIRFLOW__CORE__PLUGINS_FOLDER is not the mounted plugins folder"
    assert f"{AIRFLOW_HOME}/plugins" in (env.get("PYTHONPATH") or "").split(":"), "PYTHONPATH does not include the plugins folder"


# --- dependencies ----------------------------------------------------------------------------


def _depends_on(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {dep: "service_started" for dep in deps}
    return {dep: (spec or {}).get("condition", "service_started") for dep, spec in deps.items()}


def test_start_order(services):
    assert _depends_on(services[AIRFLOW_INIT]).get("postgres") == "service_healthy", (
        f"{AIRFLOW_INIT} does not wait for a healthy postgres"
    )
    for name in AIRFLOW_COMMANDS:
        deps = _depends_on(services[name])
        assert deps.get(AIRFLOW_INIT) == "service_completed_successfully", f"{name} does not wait for {AIRFLOW_INIT} to succeed"
        for dep in (*POSTGRES_SERVICES, "kafka"):
            assert deps.get(dep) == "service_healthy", f"{name} does not wait for a healthy {dep}"
    for name in (*POSTGRES_SERVICES, "kafka"):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    for name in POSTGRES_SERVICES:
        healthcheck = " ".join(services[name]["healthcheck"]["test"])
        assert "pg_isready" in healthcheck, f"{name} healthcheck does not use pg_isready"


# --- postgres --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", POSTGRES_SERVICES)
def test_postgres_server_settings(services, name):
    postgres, (server_settings, _) = services[name], POSTGRES_SERVICES[name]
    assert str(postgres.get("image", "")).startswith("postgres:"), f"{name} image is {postgres.get('image')!r}"
    command = _command(postgres)
    given = {}
    for flag, value in zip(command, command[1:]):
        if flag == "-c":
            key, _, setting = value.partition("=")
            given[key] = setting
    for key, value in server_settings.items():
        assert key in given, f"{name} command has no `-c {key}=...` (settings.py: {key}={value})"
        assert given[key] == value, f"{name} command sets {key}={given[key]}, settings.py says {key}={value}"


@pytest.mark.parametrize("name", POSTGRES_SERVICES)
def test_postgres_init_creates_role_and_databases(services, name):
    mounts, (_, databases) = _mounts(services[name]), POSTGRES_SERVICES[name]
    scripts = [Path(host) for target, host in mounts.items() if target.startswith("/docker-entrypoint-initdb.d")]
    assert scripts, f"{name} mounts nothing into /docker-entrypoint-initdb.d"
    sql = "\n".join(path.read_text() for path in scripts if path.is_file())
    assert sql, f"{name} init scripts {scripts} do not exist"
    role = settings.PIPELINE_ROLE
    assert re.search(rf"create\s+(role|user)\s+{role}\b", sql, re.I), f"{name} init SQL does not create role {role}"
    for db in databases:
        assert re.search(rf"create\s+database\s+{db}\s+owner\s+{role}\b", sql, re.I), (
            f"{name} init SQL does not create database {db} owned by {role}"
        )


# --- kafka -----------------------------------------------------------------------------------


def test_kafka_broker_settings(services):
    kafka = services["kafka"]
    assert str(kafka.get("image", "")).startswith("apache/kafka:"), f"kafka image is {kafka.get('image')!r}"
    env = _environment(kafka)
    roles = set((env.get("KAFKA_PROCESS_ROLES") or "").split(","))
    assert roles == {"broker", "controller"}, f"kafka KAFKA_PROCESS_ROLES is {env.get('KAFKA_PROCESS_ROLES')!r}, not broker,controller"
    for key, value in settings.KAFKA_BROKER_SETTINGS.items():
        var = _kafka_env_name(key)
        assert var in env, f"kafka has no {var} (settings.py: {key}={value})"
        assert env[var] == value, f"kafka sets {var}={env[var]}, settings.py says {key}={value}"
