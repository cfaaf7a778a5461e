"""Three Kafka nodes (KRaft, each a broker and a controller) that replicate every partition
three times, from the same jars as the stack's single node (kafka.py).

Each node has its folder in <cluster>/kafka/node-<id> (server.properties, data, log, pid
file). `up` starts the nodes that are down, so after one is killed `up` brings it back.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from . import kafka
from .proc import StackError, port_open, running_pid, start_detached, stop_pids, wait_until
from .settings import KAFKA_CLUSTER_BROKER_SETTINGS, KAFKA_CLUSTER_NODES, ClusterPorts, cluster_dir


def home() -> Path:
    return cluster_dir() / "kafka"


def node_dir(node: int) -> Path:
    return home() / f"node-{node}"


def pidfile(node: int) -> Path:
    return node_dir(node) / "kafka.pid"


def logfile(node: int) -> Path:
    return node_dir(node) / "kafka.log"


def broker_port(node: int) -> int:
    return ClusterPorts.from_env().kafka[KAFKA_CLUSTER_NODES.index(node)]


def bootstrap() -> str:
    return ",".join(f"127.0.0.1:{port}" for port in ClusterPorts.from_env().kafka)


def pids() -> dict[int, int | None]:
    """Each node's broker process id, None for a node that is down."""
    return {node: running_pid(pidfile(node), kafka.MAIN_CLASS) for node in KAFKA_CLUSTER_NODES}


def _write_config(node: int, ports: ClusterPorts) -> Path:
    index = KAFKA_CLUSTER_NODES.index(node)
    voters = ",".join(f"{n}@127.0.0.1:{port}" for n, port in zip(KAFKA_CLUSTER_NODES, ports.kafka_controllers))
    broker, controller = ports.kafka[index], ports.kafka_controllers[index]
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node_dir(node) / "data"),
        "num.partitions": "1",
        **KAFKA_CLUSTER_BROKER_SETTINGS,
    }
    path = node_dir(node) / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    kafka.write_log4j(node_dir(node) / "log4j2.properties")
    return path


def _cluster_id() -> str:
    """One id for the three nodes, made once (formatting needs it on every node)."""
    path = home() / "cluster-id"
    if not path.exists():
        path.write_text(kafka.new_cluster_id())
    return path.read_text().strip()


def _start(node: int, config: Path) -> None:
    port = broker_port(node)
    if port_open(port):
        raise StackError(f"port {port} is taken by another program; set TWOPHASE_KAFKA_CLUSTER_PORT")
    print(f"stack: starting Kafka cluster node {node} on 127.0.0.1:{port}", flush=True)
    java = ["java", "-Xms128m", "-Xmx512m", "-XX:+UseG1GC", *kafka.java_options(),
            f"-Dlog4j2.configurationFile={node_dir(node) / 'log4j2.properties'}",
            "-cp", kafka.classpath(), kafka.MAIN_CLASS, str(config)]
    start_detached(java, pidfile(node), logfile(node))


def _all_brokers_answer() -> bool:
    """True when metadata from the cluster lists all three brokers."""
    if not all(port_open(broker_port(n)) for n in KAFKA_CLUSTER_NODES):
        return False
    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap()}).list_topics(timeout=5)
    except KafkaException:
        return False
    return len(metadata.brokers) == len(KAFKA_CLUSTER_NODES)


def up() -> None:
    ports = ClusterPorts.from_env()
    kafka.ensure_jars()
    home().mkdir(parents=True, exist_ok=True)
    cluster_id = _cluster_id()
    running = pids()
    for node in KAFKA_CLUSTER_NODES:
        node_dir(node).mkdir(parents=True, exist_ok=True)
        config = _write_config(node, ports)
        kafka.format_storage(config, node_dir(node) / "data", cluster_id)
        if running[node] is None:
            _start(node, config)
    for node in KAFKA_CLUSTER_NODES:
        port = broker_port(node)
        wait_until(lambda: port_open(port), 90, f"Kafka cluster node {node}", logfile(node))
    wait_until(_all_brokers_answer, 90, "the three Kafka brokers", logfile(KAFKA_CLUSTER_NODES[0]))
    wait_until(lambda: kafka.transactions_ready(bootstrap()), 90,
               "the Kafka cluster's transaction coordinator", logfile(KAFKA_CLUSTER_NODES[0]))


def down() -> None:
    running = {node: pid for node, pid in pids().items() if pid is not None}
    if running:
        print(f"stack: stopping Kafka cluster nodes {', '.join(map(str, running))}", flush=True)
        stop_pids(list(running.values()), timeout=60)  # together: ~7 s; one at a time, over a minute
    for node in pids():
        pidfile(node).unlink(missing_ok=True)


def status() -> str:
    running = pids()
    up_nodes = [n for n, pid in running.items() if pid is not None]
    if not up_nodes:
        return "down"
    if len(up_nodes) < len(running):
        down_nodes = [str(n) for n, pid in running.items() if pid is None]
        return f"partly up: node {', '.join(down_nodes)} down ({bootstrap()})"
    return f"up, {bootstrap()}" if _all_brokers_answer() else f"running but not answering on {bootstrap()}"


def destroy() -> None:
    """Stop and delete the nodes' data (the jars are the stack's, kept)."""
    down()
    shutil.rmtree(home(), ignore_errors=True)
