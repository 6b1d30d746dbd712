"""`trio-kafka load FILE --topic T`: a resumable, exactly-once bulk load (BulkLoader).

Rows are JSON Lines (each line is a record value, as written: not parsed, unless
`--key-field` needs its field) or CSV (each row becomes a JSON object value; a row with
more or fewer fields than the header is refused, naming its line). `--key-field` takes the key from a field. The load id names the load
in the topic's manifest headers; by default it is derived from the file's absolute path
and size, so running the same command again resumes where the last run stopped. The
checkpoints record `--key-field` and `--format` (with the partition count and the
guarantee): a resume with others is refused, and a finished load is recognised from
its checkpoints without reading the file again.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import click

from trio_kafka._cli._security import pop_security_options, security_options
from trio_kafka.client import Security

_DEFAULT_BATCH = 512 * 1024


def input_digest(path: Path) -> str:
    """The file's content as the load records it with its routing ("sha256:..."): a
    rerun of the same path and size (the same default load id) with other content is
    refused instead of resuming by row numbers that now name other rows."""
    with path.open("rb") as data:
        return "sha256:" + hashlib.file_digest(data, "sha256").hexdigest()


def default_load_id(path: Path) -> str:
    resolved = path.resolve()
    digest = hashlib.sha256(f"{resolved}\0{resolved.stat().st_size}".encode()).hexdigest()
    return f"{path.name}:{digest[:16]}"


def _key_of(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


def read_rows(path: Path, fmt: str, key_field: str | None) -> Iterator[Any]:
    """The file's rows: values, or (key, value) pairs with `key_field`."""
    if fmt == "jsonl":
        with path.open("rb") as lines:
            for number, line in enumerate(lines, 1):
                line = line.rstrip(b"\r\n")
                if not line.strip():
                    continue
                if key_field is None:
                    yield line
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    raise click.ClickException(f"{path}:{number}: not JSON: {exc}") from None
                key = obj.get(key_field) if isinstance(obj, dict) else None
                yield (_key_of(key), line)
    else:
        for row in csv_rows(path):
            value = json.dumps(row, separators=(",", ":")).encode()
            yield value if key_field is None else (_key_of(row.get(key_field)), value)


def csv_rows(path: Path) -> Iterator[dict[str, str]]:
    """The rows of a CSV file with a header line. DictReader files extra fields under
    None and fills missing ones with None: a row that does not match its header is
    refused, naming its line (`count_rows` reads them all before anything is written).
    UTF-8, with or without the byte order mark spreadsheets write."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        try:
            for row in reader:
                if None in row or None in row.values():
                    raise click.ClickException(
                        f"{path}:{reader.line_num}: {_width(row)} fields, the header has "
                        f"{len(reader.fieldnames or ())}"
                    )
                yield row
        except UnicodeDecodeError as exc:
            raise click.ClickException(
                f"{path} is not UTF-8 ({exc.reason}: byte "
                f"{exc.object[exc.start : exc.start + 1]!r}): CSV input must be UTF-8"
            ) from None


def check_key_field(path: Path, fmt: str, key_field: str) -> None:
    """Refuse a `--key-field` the rows do not have (naming it and the fields they do
    have), before anything is written: a typo must not load every row without a key."""
    if fmt == "csv":
        with path.open(newline="", encoding="utf-8-sig") as handle:
            try:
                columns = csv.DictReader(handle).fieldnames or []
            except UnicodeDecodeError as exc:
                raise click.ClickException(f"{path}: not UTF-8 ({exc})") from None
        if key_field not in columns:
            raise click.ClickException(
                f"--key-field {key_field!r} is not a column of {path}; its columns are "
                f"{_names(columns)}"
            )
        return
    seen: dict[str, None] = {}
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise click.ClickException(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise click.ClickException(
                    f"--key-field {key_field!r}: {path}:{number} is a JSON "
                    f"{type(obj).__name__}, not an object with fields"
                )
            if key_field not in obj:
                if not seen:
                    raise click.ClickException(
                        f"--key-field {key_field!r} is not a field of the rows of {path}; "
                        f"their fields are {_names(obj)}"
                    )
                raise click.ClickException(
                    f"--key-field {key_field!r}: {path}:{number} has no such field (its "
                    f"fields are {_names(obj)}); earlier rows have it"
                )
            seen.update(dict.fromkeys(obj))


def _width(row: dict[Any, Any]) -> int:
    """How many fields a CSV row really had (DictReader's None key holds the extras)."""
    extra = row.get(None)
    return sum(1 for k, v in row.items() if k is not None and v is not None) + len(extra or ())


def _names(names: Any) -> str:
    return ", ".join(repr(name) for name in names) or "(none)"


def count_rows(path: Path, fmt: str) -> int:
    if fmt == "jsonl":
        with path.open("rb") as lines:
            return sum(1 for line in lines if line.strip())
    return sum(1 for _ in csv_rows(path))


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--topic",
    required=True,
    help="Topic to load into (created if missing: with CAS on when --guarantee is "
    "exactly_once_cas, or auto on a broker with the extension).",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Partitions when the topic is created (an existing topic keeps its own).",
)
@click.option("--bootstrap", help="host:port of a broker (default: an embedded mock broker).")
@click.option("--key-field", help="Field (JSON) or column (CSV) holding the record key.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "csv"]),
    help="Input format (default: from the file name; .csv is CSV, anything else JSON Lines).",
)
@click.option(
    "--load-id",
    help="Names the load in the manifest (default: from path and size; a rerun whose "
    "file has other content is refused: pass a new --load-id to load it).",
)
@click.option(
    "--batch-bytes",
    type=click.IntRange(min=1),
    default=_DEFAULT_BATCH,
    show_default=True,
    help="Bytes per batch (a transaction holds 8).",
)
@click.option(
    "--guarantee",
    type=click.Choice(["auto", "exactly_once_cas", "transactional"]),
    default="auto",
    show_default=True,
    help="exactly_once_cas (the broker's expected-offset check), transactional (any "
    "Kafka 2.5+: rows and checkpoint commit together), or auto: CAS where the broker "
    "and topic have it, transactions elsewhere.",
)
@click.option("--quiet", is_flag=True, help="No progress display.")
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="On SIGINT/SIGTERM: seconds to finish the batches in flight before stopping at once.",
)
@security_options
def load(
    file: Path,
    topic: str,
    partitions: int,
    bootstrap: str | None,
    key_field: str | None,
    fmt: str | None,
    load_id: str | None,
    batch_bytes: int,
    guarantee: str,
    quiet: bool,
    shutdown_timeout: float,
    **security: Any,
) -> None:
    """Load FILE into TOPIC exactly once; run it again to resume after an interruption.

    SIGINT or SIGTERM stops it cleanly: no new rows, the batches in flight are finished
    (for up to --shutdown-timeout seconds; a second signal stops at once), then it exits
    with 130 (SIGINT) or 143 (SIGTERM), or 0 if the load had finished anyway. The same
    command run again resumes."""
    import trio

    connection = pop_security_options(security)
    if bootstrap is None and (connection.ssl_context is not None or connection.sasl is not None):
        raise click.BadParameter(
            "TLS and SASL options need --bootstrap (the embedded mock broker is plaintext)",
            param_hint="--bootstrap",
        )
    fmt = fmt or ("csv" if file.suffix.lower() == ".csv" else "jsonl")
    load_id = load_id or default_load_id(file)
    try:
        code = trio.run(
            _load,
            file,
            topic,
            partitions,
            bootstrap,
            key_field,
            fmt,
            load_id,
            batch_bytes,
            guarantee,
            quiet,
            shutdown_timeout,
            connection,
        )
    except KeyboardInterrupt:
        # Before the signal receiver was open (counting the rows, starting the loop).
        raise click.ClickException("interrupted: run the same command again to resume") from None
    if code:
        sys.exit(code)


@contextlib.asynccontextmanager
async def _broker(bootstrap: str | None, partitions: int) -> AsyncIterator[str]:
    if bootstrap is not None:
        yield bootstrap
        return
    from trio_kafka.broker import ClusterOptions, open_cluster

    options = ClusterOptions(default_partitions=partitions)
    async with open_cluster(options=options) as cluster:
        click.echo(
            f"embedded mock broker at {cluster.bootstrap}: the data lives in this process only "
            "and is gone when it exits, so an interrupted load cannot be resumed; for a "
            "resumable load, run `trio-kafka broker --port 9092` and pass --bootstrap "
            "127.0.0.1:9092",
            err=True,
        )
        yield cluster.bootstrap


async def _load(
    file: Path,
    topic: str,
    partitions: int,
    bootstrap: str | None,
    key_field: str | None,
    fmt: str,
    load_id: str,
    batch_bytes: int,
    guarantee: str,
    quiet: bool,
    shutdown_timeout: float,
    connection: Security,
) -> int:
    """The load; returns the exit status (_cli/_signals.py)."""
    import trio

    from trio_kafka._cli._signals import stop_on_signals
    from trio_kafka.client import BulkLoader, create_topic
    from trio_kafka.errors import KafkaError
    from trio_kafka.net import group_leaves, open_selector

    total = count_rows(file, fmt)
    digest = input_digest(file)
    size = file.stat().st_size
    acked = [0, 0]

    # Without a terminal, one line per acknowledged batch (logs; the SIGKILL test kills
    # the loader at a point it reads from these lines, so they must not lag).
    plain = not quiet and not sys.stderr.isatty()

    def on_progress(records: int, nbytes: int) -> None:
        acked[0] += records
        acked[1] += nbytes
        if plain:
            print(f"progress: loaded {acked[0]} records, {acked[1]} bytes", file=sys.stderr)

    fed = _Fed()
    result = None
    finished_before = False  # the load was already complete: nothing fed this time
    async with stop_on_signals(
        shutdown_timeout, doing="no new rows; finishing the batches in flight"
    ) as stop:
        try:
            async with (
                _broker(bootstrap, partitions) as servers,
                open_selector(
                    servers, transport=connection.transport(None), sasl=connection.sasl
                ) as selector,
            ):
                loader = BulkLoader(
                    selector,
                    topic,
                    load_id,
                    guarantee=guarantee,
                    batch_bytes=batch_bytes,
                    on_progress=on_progress,
                    # Recorded with the checkpoints: a resume with others is refused.
                    routing={"key_field": key_field, "format": fmt, "input": digest},
                )
                # A finished load is known from its checkpoints: the input is not read
                # again.
                result = await loader.finished(total)
                finished_before = result is not None
                if result is None and key_field is not None:
                    check_key_field(file, fmt, key_field)  # before anything is written
                # CAS when asked for, or with "auto" where the broker has it (Apache
                # Kafka refuses the CAS topic config as unknown).
                cas = guarantee == "exactly_once_cas" or (
                    guarantee == "auto" and (await selector.negotiated_versions()).supports_cas
                )
                if await create_topic(selector, topic, partitions, cas=cas):
                    click.echo(
                        f"created topic {topic} ({partitions} partition{'s' if partitions != 1 else ''}, "
                        f"CAS {'on' if cas else 'off'})",
                        err=True,
                    )
                click.echo(
                    f"load {load_id}: {total} row{'s' if total != 1 else ''} from {file}", err=True
                )
                rows = fed.rows(stop, read_rows(file, fmt, key_field))
                # The load's error is raised after the display's nursery, not from inside
                # it (where trio would wrap it in an exception group).
                failure: KafkaError | None = None
                async with trio.open_nursery() as nursery:
                    display = _Display(total, size, quiet)
                    nursery.start_soon(display.run, loader, acked)
                    try:
                        if result is None:
                            result = await loader.run(rows)
                    except KafkaError as exc:
                        failure = exc
                    nursery.cancel_scope.cancel()
                if failure is not None:
                    raise failure
                display.finish(loader, acked)
        except KafkaError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
        except BaseExceptionGroup as group:
            # One Kafka error from inside a nursery we do not own (the embedded broker's).
            leaves = group_leaves(group)
            if len(leaves) == 1 and isinstance(leaves[0], KafkaError):
                raise click.ClickException(f"{type(leaves[0]).__name__}: {leaves[0]}") from None
            if len(leaves) == 1 and isinstance(leaves[0], click.ClickException):
                raise leaves[0] from None  # bad input (check_key_field)
            raise
    if result is None or not (finished_before or fed.exhausted):
        # A signal cut the load short (rows held back, or the batches in flight
        # abandoned at the deadline): say where it stands.
        how = (
            "stopped at once: the batches in flight were abandoned, as a crash leaves them"
            if stop.forced
            else f"stopped: every row handed to the loader is written ({acked[0]} by this run)"
        )
        click.echo(
            f"{how}; {fed.count} of {total} rows had been handed to it when {stop.name} came. "
            + (
                "Its checkpoints are in the log with its rows: run the same command again to resume"
                if bootstrap is not None
                else "The embedded mock broker's data is gone with it: load into a broker "
                "of its own (--bootstrap) for a resumable load"
            ),
            err=True,
        )
        return stop.exit_code
    click.echo(
        f"done: {result.loaded} records loaded, {result.skipped} already there (skipped); "
        + ", ".join(f"partition {p.partition} ends at {p.end_offset}" for p in result.partitions)
        + f"; guarantee {result.guarantee}",
        err=True,
    )
    return 0


class _Fed:
    """Hands the input's rows to the loader until a signal asks to stop."""

    def __init__(self) -> None:
        # Rows handed over so far.
        self.count = 0
        # True once the input ran out (every row handed over, none held back).
        self.exhausted = False

    def rows(self, stop: Any, rows: Iterator[Any]) -> Iterator[Any]:
        requested = stop.requested
        for row in rows:
            if requested.is_set():
                return
            self.count += 1
            yield row
        self.exhausted = True


class _Display:
    """Progress: a rich bar (records, MB/s, ETA) on a terminal, plain lines otherwise
    (logs, and the SIGKILL test, which reads them)."""

    def __init__(self, total: int, size: int, quiet: bool) -> None:
        self.total = total
        self.size = size
        self.quiet = quiet
        self.tty = sys.stderr.isatty()

    async def run(self, loader: Any, acked: list[int]) -> None:
        import trio

        if self.quiet:
            return
        if not self.tty:
            return  # on_progress prints the lines
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        progress = Progress(
            TextColumn("[bold]loading"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} records"),
            TextColumn("{task.fields[mbps]:.1f} MB/s"),
            TimeRemainingColumn(),
        )
        task = progress.add_task("load", total=self.total, mbps=0.0)
        started = trio.current_time()
        with progress:
            while True:
                elapsed = max(trio.current_time() - started, 1e-6)
                progress.update(task, completed=acked[0], mbps=acked[1] / elapsed / 1e6)
                await trio.sleep(0.1)

    def _line(self, acked: list[int]) -> None:
        print(f"progress: loaded {acked[0]} records, {acked[1]} bytes", file=sys.stderr, flush=True)

    def finish(self, loader: Any, acked: list[int]) -> None:
        if not self.quiet and not self.tty:
            self._line(acked)


__all__ = ["count_rows", "default_load_id", "input_digest", "load", "read_rows"]
