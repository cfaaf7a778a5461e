"""Apache Kafka in KRaft mode, one node, from Apache's own jars on Maven Central.

Maven fetches the jars named in kafka-pom.xml (cached in ~/.m2 between runs) into
<stack>/kafka/libs; the node then runs as `java -cp libs/* kafka.Kafka server.properties`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import uuid
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from .proc import StackError, port_open, run, running_pid, start_detached, stop_pid, wait_until
from .settings import KAFKA_BROKER_SETTINGS, Ports, stack_dir

POM = Path(__file__).with_name("kafka-pom.xml")
MAIN_CLASS = "kafka.Kafka"


def home() -> Path:
    return stack_dir() / "kafka"


def libs() -> Path:
    return home() / "libs"


def logfile() -> Path:
    return home() / "kafka.log"


def pidfile() -> Path:
    return home() / "kafka.pid"


def bootstrap() -> str:
    return f"127.0.0.1:{Ports.from_env().kafka}"


def classpath() -> str:
    return f"{libs()}/*"


def ensure_jars() -> None:
    """Fetch the broker jars with Maven when missing or when the pom changed."""
    stamp = libs() / ".pom.sha256"
    want = hashlib.sha256(POM.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == want:
        return
    if shutil.which("mvn") is None:
        if os.geteuid() != 0:
            raise StackError("Maven (mvn) is needed to fetch the Kafka jars; `apt-get install maven`")
        run(["apt-get", "update", "-q"])
        run(["apt-get", "install", "-y", "-q", "maven"], env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    print("stack: fetching the Kafka jars from Maven Central (first time: ~1 min)", flush=True)
    shutil.rmtree(libs(), ignore_errors=True)
    run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
         f"-DoutputDirectory={libs()}", "-DincludeScope=runtime"])
    stamp.write_text(want)


def _write_config(ports: Ports) -> Path:
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{ports.kafka_controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{ports.kafka},CONTROLLER://127.0.0.1:{ports.kafka_controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{ports.kafka}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(home() / "data"),
        "num.partitions": "1",
        **KAFKA_BROKER_SETTINGS,
    }
    path = home() / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    write_log4j(home() / "log4j2.properties")
    return path


def write_log4j(path: Path) -> None:
    """A quiet log4j2 configuration: warnings, and the line saying the node started."""
    path.write_text(
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.out.ref = out\n"
        "appender.out.type = Console\n"
        "appender.out.name = out\n"
        "appender.out.layout.type = PatternLayout\n"
        "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
        "logger.kafka.name = kafka\nlogger.kafka.level = WARN\n"
        "logger.apache.name = org.apache.kafka\nlogger.apache.level = WARN\n"
        "logger.started.name = kafka.server.KafkaRaftServer\nlogger.started.level = INFO\n"
    )


def new_cluster_id() -> str:
    # Like Kafka's own random ids, never one that begins with "-" (a command
    # line would read it as an option; it is also passed as --cluster-id=).
    cluster_id = "-"
    while cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def format_storage(config: Path, data: Path, cluster_id: str) -> None:
    """Format a node's log folder once (KRaft needs it before the first start)."""
    if (data / "meta.properties").exists():
        return
    run(["java", "-cp", classpath(), "kafka.tools.StorageTool", "format",
         f"--cluster-id={cluster_id}", f"--config={config}"])


def answers(timeout: float = 5.0) -> bool:
    """True when the broker returns cluster metadata."""
    if not port_open(Ports.from_env().kafka):
        return False
    try:
        AdminClient({"bootstrap.servers": bootstrap()}).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def transactions_ready(servers: str | None = None) -> bool:
    """True when the transaction coordinator accepts a transactional producer."""
    producer = Producer({"bootstrap.servers": servers or bootstrap(), "transactional.id": "stack-health-check",
                         "log_level": 3})
    try:
        producer.init_transactions(10)
        return True
    except KafkaException:
        return False


def java_options() -> list[str]:
    """A node's extra JVM options, from TWOPHASE_KAFKA_JAVA_OPTIONS (scripts/test sets some
    that start and run a node of small loads on less CPU)."""
    return os.environ.get("TWOPHASE_KAFKA_JAVA_OPTIONS", "").split()


def up() -> None:
    ports = Ports.from_env()
    ensure_jars()
    home().mkdir(parents=True, exist_ok=True)
    config = _write_config(ports)
    format_storage(config, home() / "data", new_cluster_id())
    if running_pid(pidfile(), MAIN_CLASS) is None:
        if port_open(ports.kafka):
            raise StackError(f"port {ports.kafka} is taken by another program; set TWOPHASE_KAFKA_PORT")
        print(f"stack: starting Kafka on {bootstrap()}", flush=True)
        java = ["java", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", *java_options(),
                f"-Dlog4j2.configurationFile={home() / 'log4j2.properties'}",
                "-cp", classpath(), MAIN_CLASS, str(config)]
        start_detached(java, pidfile(), logfile())
    wait_until(answers, 90, "Kafka", logfile())
    wait_until(transactions_ready, 90, "Kafka's transaction coordinator", logfile())


def down() -> None:
    pid = running_pid(pidfile(), MAIN_CLASS)
    if pid is not None:
        print("stack: stopping Kafka", flush=True)
        stop_pid(pid, timeout=60)
    pidfile().unlink(missing_ok=True)


def status() -> str:
    if running_pid(pidfile(), MAIN_CLASS) is None:
        return "down"
    return f"up, {bootstrap()}" if answers() else f"running but not answering on {bootstrap()}"


def destroy() -> None:
    """Delete the node's data (keeps the fetched jars)."""
    down()
    shutil.rmtree(home() / "data", ignore_errors=True)
