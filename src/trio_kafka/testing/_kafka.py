"""Start and stop Apache Kafka (KRaft, from Maven Central's jars) on free loopback ports.

Theory of operation. `make kafka` copies `org.apache.kafka:kafka_2.13` and its
dependencies (kafka/pom.xml pins the version and adds the slf4j-to-log4j2 binding the
pom leaves out) into `.cache/kafka/jars`. A node here is one JVM running
`kafka.Kafka server.properties` as a combined broker and controller; its directory (a
fresh temporary folder) holds its properties, a console-only log4j2 configuration, its
log file and its data. It is formatted once (`kafka.tools.StorageTool format`, static
voters, every node of a cluster with the same cluster id) and is ready when it logs
`Kafka Server started` and answers a Metadata request that lists every node of its
cluster. `kill()` (SIGKILL), `stop()` (SIGTERM, a controlled shutdown) and `start()`
keep the directory, so a restart recovers from disk as a real one does.
Security listeners beside PLAINTEXT: see `_kafka_security.py`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from trio_kafka.protocol import decode_response, encode_request
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.testing._kafka_security import (
    SASL_MECHANISMS,
    Advertised,
    ListenerSecurity,
    advertised_addresses,
    write_certificates,
)
from trio_kafka.testing._tansu import free_port

#: The Kafka release the project tests against (kafka/pom.xml pins the same).
KAFKA_VERSION = "4.4.0"

#: Set to a folder of jars to use instead of `.cache/kafka/jars`.
JARS_ENV = "TRIO_KAFKA_KAFKA_JARS"

_STARTED = "Kafka Server started"

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
    Root:
      level: {level}
      AppenderRef:
        - ref: STDOUT
"""
# (KafkaRaftServer logs "Kafka Server started" at INFO: readiness reads it at any level.)


class KafkaUnavailableError(RuntimeError):
    """Kafka cannot be started here: no jars, or no Java. The message says what to do."""


def kafka_jars() -> Path:
    """The folder of Kafka's jars: `$TRIO_KAFKA_KAFKA_JARS`, else `.cache/kafka/jars` of
    this checkout (or of the current directory), as `make kafka` leaves it."""
    candidates: list[Path] = []
    if os.environ.get(JARS_ENV):
        candidates.append(Path(os.environ[JARS_ENV]))
    else:
        checkout = Path(__file__).resolve().parents[3]
        candidates += [checkout / ".cache/kafka/jars", Path.cwd() / ".cache/kafka/jars"]
    for folder in candidates:
        if any(folder.glob("kafka_2.13-*.jar")):
            return folder
    where = " or ".join(str(c) for c in candidates)
    raise KafkaUnavailableError(
        f"Apache Kafka's jars are not in {where}: run `make kafka` in the trio-kafka checkout "
        f"(it needs Java 17+ and Maven, and fetches org.apache.kafka:kafka_2.13:{KAFKA_VERSION} "
        f"from Maven Central), or set {JARS_ENV} to a folder holding them"
    )


def java_binary() -> str:
    """`$JAVA_HOME/bin/java` or `java` on the PATH (Kafka 4 needs Java 17 or newer)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin/java").is_file():
        return str(Path(home) / "bin/java")
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailableError("Apache Kafka needs Java 17 or newer: no `java` on the PATH")
    return found


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@attrs.define(eq=False)
class KafkaNode:
    """One Kafka process (broker and controller in one); `bootstrap` is "127.0.0.1:port".

    `kill()` is a crash (SIGKILL, no flush), `stop()` a clean shutdown; `start()` runs it
    again on the same ports and directory and waits until it is ready. `address(name)`
    is the "127.0.0.1:port" of its listener for that security protocol (`"SASL_SSL"`),
    and `ca_file` the CA certificate (PEM) that signed its TLS listeners' certificate.
    """

    node_id: int
    #: The client listener's port (PLAINTEXT).
    port: int
    controller_port: int
    #: Holds server.properties, log4j2.yaml, kafka.log and data/.
    directory: Path
    #: How many nodes its cluster has (ready when Metadata lists them all).
    cluster_size: int = 1
    heap: str = "512m"
    startup_timeout: float = 60.0
    process: subprocess.Popen[bytes] | None = None
    #: Security protocol -> port of each client listener (PLAINTEXT's is `port`).
    listener_ports: dict[str, int] = attrs.field(factory=dict)
    #: The CA certificate (PEM) clients verify its TLS listeners with; None without TLS.
    ca_file: Path | None = None
    #: Where in `log_path` the current process's output begins (readiness reads from it).
    _mark: int = attrs.field(default=0, init=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def address(self, listener: str = "PLAINTEXT") -> str:
        """The "127.0.0.1:port" of its listener for `listener` (a security protocol)."""
        name = listener.upper()
        if name == "PLAINTEXT":
            return self.bootstrap
        if name not in self.listener_ports:
            raise KeyError(
                f"Kafka node {self.node_id} has no {listener} listener (it has "
                f"{', '.join(['PLAINTEXT', *self.listener_ports])}): pass "
                f"listeners=(..., {name!r}) to kafka_broker() or kafka_cluster()"
            )
        return f"127.0.0.1:{self.listener_ports[name]}"

    @property
    def log_path(self) -> Path:
        """Everything the broker printed, across its restarts."""
        return self.directory / "kafka.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and reap it: a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after `timeout` seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def start(self, *, wait: bool = True) -> None:
        """Start it again (after `kill` or `stop`) with its directory as it was left."""
        if self.running:
            raise RuntimeError(f"Kafka node {self.node_id} is still running: kill() it first")
        self._spawn()
        if wait:
            self.wait_ready()

    def _spawn(self) -> None:
        argv = [
            java_binary(),
            f"-Xmx{self.heap}",
            "-Xms64m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.yaml'}",
            "-Djava.awt.headless=true",
            "-cp",
            f"{kafka_jars()}/*",
            "kafka.Kafka",
            str(self.directory / "server.properties"),
        ]
        self._mark = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log.close()

    def wait_ready(self) -> None:
        """Until it logged `Kafka Server started` and Metadata lists the whole cluster."""
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise RuntimeError(
                    f"Kafka node {self.node_id} exited with code {code} before it was ready; "
                    f"its last lines:\n{self.tail()}"
                )
            if self._started_logged() and _metadata_brokers(self.port) >= self.cluster_size:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Kafka node {self.node_id} on {self.bootstrap} was not ready within "
                    f"{self.startup_timeout} s; its last lines:\n{self.tail()}"
                )
            time.sleep(0.05)

    def _started_logged(self) -> bool:
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._mark)
                return _STARTED.encode() in f.read()
        except FileNotFoundError:
            return False

    def tail(self, lines: int = 30) -> str:
        """The last lines of its log (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _metadata_brokers(port: int) -> int:
    """How many brokers a Metadata v12 request to 127.0.0.1:port lists (0 on any error)."""
    request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    try:
        with socket.create_connection(("127.0.0.1", port), 1.0) as s:
            s.settimeout(2.0)
            s.sendall(encode_request(request, version=12, correlation_id=1, client_id="ready"))
            size = struct.unpack(">i", _read_exactly(s, 4))[0]
            _, response = decode_response(MetadataRequest, 12, _read_exactly(s, size))
    except (OSError, ValueError, struct.error):
        return 0
    return len(response.brokers)


def _read_exactly(s: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = s.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("closed")
        chunks += chunk
    return bytes(chunks)


@attrs.define(eq=False)
class KafkaCluster:
    """Kafka nodes that form one cluster; `bootstrap` lists all of them."""

    nodes: list[KafkaNode]
    cluster_id: str

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def addresses(self, listener: str = "PLAINTEXT") -> str:
        """Every node's address on its `listener` (a security protocol), comma-separated."""
        return ",".join(node.address(listener) for node in self.nodes)

    @property
    def ca_file(self) -> Path | None:
        """The CA certificate (PEM) of its TLS listeners (one for the whole cluster)."""
        return self.nodes[0].ca_file if self.nodes else None

    def node(self, node_id: int) -> KafkaNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no Kafka node {node_id} (nodes: {[n.node_id for n in self.nodes]})")


def _server_properties(
    node: KafkaNode,
    voters: str,
    *,
    advertised: Mapping[str, str],
    internal_port: int | None,
    replication: int,
    security: ListenerSecurity,
    keystore: Path | None,
    extra: Mapping[str, str],
) -> dict[str, str]:
    min_isr = "2" if replication >= 3 else "1"
    ports = {"PLAINTEXT": node.port, **node.listener_ports}
    listeners = [f"{name}://127.0.0.1:{ports[name]}" for name in security.listeners]
    advertised_listeners = [
        f"{name}://{advertised.get(name) or node.address(name)}" for name in security.listeners
    ]
    inter_broker = "PLAINTEXT"
    if internal_port is not None:
        # Replication and transaction markers on a listener of their own: a proxy in
        # front of the advertised one then stands between clients and brokers only.
        listeners.append(f"INTERNAL://127.0.0.1:{internal_port}")
        advertised_listeners.append(f"INTERNAL://127.0.0.1:{internal_port}")
        inter_broker = "INTERNAL"
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{node.controller_port}"]),
        "advertised.listeners": ",".join(advertised_listeners),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": inter_broker,
        "log.dirs": str(node.directory / "data"),
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "log.cleaner.dedupe.buffer.size": "2097152",
        # A killed node's registration lapses after the session timeout, and until then
        # its restart waits (9 s by default); failover in tests wants it quick too.
        "broker.session.timeout.ms": "3000",
        "broker.heartbeat.interval.ms": "500",
    }
    props.update(security.properties(keystore))
    if internal_port is not None:
        props["listener.security.protocol.map"] += ",INTERNAL:PLAINTEXT"
    props.update(extra)
    return props


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def _format(
    node: KafkaNode, cluster_id: str, features: Sequence[str], extra: Sequence[str]
) -> None:
    argv = [
        java_binary(),
        f"-Dlog4j2.configurationFile={node.directory / 'log4j2.yaml'}",
        "-cp",
        f"{kafka_jars()}/*",
        "kafka.tools.StorageTool",
        "format",
        f"--cluster-id={cluster_id}",  # one argument: an id may begin with "-"
        "-c",
        str(node.directory / "server.properties"),
    ]
    for feature in features:
        argv += ["--feature", feature]
    argv += extra
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(
            f"formatting Kafka node {node.node_id} failed (exit {done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


@contextlib.contextmanager
def kafka_cluster(
    nodes: int = 3,
    *,
    transaction_version: int | None = None,
    server_properties: Mapping[str, str] | None = None,
    advertised: Sequence[Advertised] | None = None,
    ports: Sequence[int] | None = None,
    internal_listener: bool = False,
    startup_timeout: float = 90.0,
    heap: str = "512m",
    log_level: str = "INFO",
    listeners: Sequence[str] = ("PLAINTEXT",),
    sasl_users: Mapping[str, str] | None = None,
    sasl_mechanisms: Sequence[str] = SASL_MECHANISMS,
) -> Iterator[KafkaCluster]:
    """Run `nodes` Kafka nodes as one KRaft cluster on free 127.0.0.1 ports for the block.

    Every node is broker and controller (static voters). With 3 or more nodes, topics
    default to replication factor 3 and `min.insync.replicas=2` (the internal topics
    too); with fewer, 1. `transaction_version` finalizes that feature at format time (a
    fresh 4.x cluster takes 2, transactions v2 of KIP-890, unless given 0 or 1).
    `server_properties` are added to (or replace) every node's; `advertised` gives each
    node's advertised "host:port" (e.g. a `FaultProxy`'s) instead of its own, for its
    PLAINTEXT listener, or a mapping from security protocol to "host:port" for several;
    `ports` each node's client (PLAINTEXT) port (picked free, e.g. with `free_port()`, so
    that a proxy can be opened to it before the node starts) instead of a free one.
    `internal_listener=True` gives every node a listener of its own (on a free port) for
    replication and transaction markers, so that a proxy at the advertised address stands
    between clients and brokers only (without it, brokers reach each other through the
    advertised address too). The nodes are stopped and their directories removed after
    the block.

    `listeners` adds client listeners by security protocol: `"SASL_PLAINTEXT"`,
    `"SSL"`, `"SASL_SSL"` (PLAINTEXT is always there: the nodes talk to each other and
    to their controllers in plaintext). SASL listeners enable `sasl_mechanisms` (PLAIN,
    SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER with unsecured JWTs; all by default) for
    the users of `sasl_users` (name -> password). TLS listeners present a certificate
    for 127.0.0.1 and localhost signed by a CA made for this cluster: clients verify it
    with `cluster.ca_file` (needs `trustme`: `pip install 'trio-kafka[testing]'`).
    """
    kafka_jars(), java_binary()  # fail at once, with the remedy, when Kafka is missing
    if advertised is not None and len(advertised) != nodes:
        raise ValueError(f"advertised names {len(advertised)} addresses for {nodes} nodes")
    if ports is not None and len(ports) != nodes:
        raise ValueError(f"ports names {len(ports)} ports for {nodes} nodes")
    security = ListenerSecurity(listeners, sasl_users or {}, sasl_mechanisms)
    advertised_by_node = (
        [{} for _ in range(nodes)]
        if advertised is None
        else [advertised_addresses(a) for a in advertised]
    )
    root = Path(tempfile.mkdtemp(prefix="trio-kafka-"))
    cluster = KafkaCluster([], _cluster_id())
    try:
        ca_file, keystore = write_certificates(root) if security.tls else (None, None)
        for i in range(nodes):
            directory = root / f"node{i + 1}"
            directory.mkdir()
            cluster.nodes.append(
                KafkaNode(
                    node_id=i + 1,
                    port=free_port() if ports is None else ports[i],
                    controller_port=free_port(),
                    directory=directory,
                    cluster_size=nodes,
                    heap=heap,
                    startup_timeout=startup_timeout,
                    listener_ports={name: free_port() for name in security.listeners[1:]},
                    ca_file=ca_file,
                )
            )
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in cluster.nodes)
        features = (
            [] if transaction_version is None else [f"transaction.version={transaction_version}"]
        )
        for i, node in enumerate(cluster.nodes):
            (node.directory / "log4j2.yaml").write_text(_LOG4J2.format(level=log_level))
            props = _server_properties(
                node,
                voters,
                advertised=advertised_by_node[i],
                internal_port=free_port() if internal_listener else None,
                replication=3 if nodes >= 3 else 1,
                security=security,
                keystore=keystore,
                extra=server_properties or {},
            )
            _write_properties(node.directory / "server.properties", props)
            _format(node, cluster.cluster_id, features, security.format_arguments())
        for node in cluster.nodes:
            node.start(wait=False)
        for node in cluster.nodes:
            node.wait_ready()
        yield cluster
    finally:
        for node in cluster.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in cluster.nodes:
            node.stop(timeout=20.0)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def kafka_broker(
    *,
    transaction_version: int | None = None,
    server_properties: Mapping[str, str] | None = None,
    advertised: Advertised | None = None,
    port: int | None = None,
    internal_listener: bool = False,
    startup_timeout: float = 90.0,
    heap: str = "512m",
    log_level: str = "INFO",
    listeners: Sequence[str] = ("PLAINTEXT",),
    sasl_users: Mapping[str, str] | None = None,
    sasl_mechanisms: Sequence[str] = SASL_MECHANISMS,
) -> Iterator[KafkaNode]:
    """Run one Kafka node (broker and controller) on free 127.0.0.1 ports for the block.

    `advertised` ("host:port") is the address Metadata gives clients instead of its own,
    e.g. a `FaultProxy` in front of it (a mapping from security protocol to "host:port"
    sets it per listener); `port` its client port instead of a free one.
    `listeners=("PLAINTEXT", "SASL_SSL")`, `sasl_users` and `sasl_mechanisms` add
    security listeners: `node.address("SASL_SSL")`, `node.ca_file`. See `kafka_cluster`
    for the other options.
    """
    with kafka_cluster(
        1,
        transaction_version=transaction_version,
        server_properties=server_properties,
        advertised=None if advertised is None else [advertised],
        ports=None if port is None else [port],
        internal_listener=internal_listener,
        startup_timeout=startup_timeout,
        heap=heap,
        log_level=log_level,
        listeners=listeners,
        sasl_users=sasl_users,
        sasl_mechanisms=sasl_mechanisms,
    ) as cluster:
        yield cluster.nodes[0]
