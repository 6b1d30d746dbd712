"""`ProducerMetrics`: counters the core keeps as it goes, and a frozen snapshot."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from trio_kafka.producer._batch import ProducerBatch

_RESERVOIR = 1024


@attrs.frozen(slots=True)
class MetricsSnapshot:
    records_sent: int
    records_acknowledged: int
    records_failed: int
    records_ambiguous: int
    record_retries: int
    batches_sent: int
    bytes_sent: int
    average_batch_size: float
    requests_sent: int
    request_latency_p50: float
    request_latency_p99: float
    request_latency_max: float
    buffer_in_use: int
    epoch_bumps: int
    #: Batches the broker refused as too large and the producer split (MESSAGE_TOO_LARGE).
    batch_splits: int = 0


class ProducerMetrics:
    """Counters (owned by the core; the driver reads `snapshot()`)."""

    def __init__(self) -> None:
        self.records_sent = 0
        self.records_acknowledged = 0
        self.records_failed = 0
        self.records_ambiguous = 0
        self.record_retries = 0
        self.batches_sent = 0
        self.bytes_sent = 0
        self.requests_sent = 0
        self.epoch_bumps = 0
        self.batch_splits = 0
        # The last _RESERVOIR request latencies (a ring), seconds.
        self._latencies: list[float] = []
        self._next = 0

    def count_drained(self, requests: Iterable[Sequence[ProducerBatch]]) -> None:
        """The batches of each request drained for sending (retries counted apart)."""
        for batches in requests:
            self.requests_sent += 1
            for batch in batches:
                self.batches_sent += 1
                self.records_sent += batch.record_count
                self.bytes_sent += batch.size
                if batch.attempts > 1:
                    self.record_retries += batch.record_count

    def record_latency(self, seconds: float) -> None:
        if len(self._latencies) < _RESERVOIR:
            self._latencies.append(seconds)
        else:
            self._latencies[self._next] = seconds
            self._next = (self._next + 1) % _RESERVOIR

    def snapshot(self, buffer_in_use: int = 0) -> MetricsSnapshot:
        ordered = sorted(self._latencies)

        def pct(q: float) -> float:
            if not ordered:
                return 0.0
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

        return MetricsSnapshot(
            records_sent=self.records_sent,
            records_acknowledged=self.records_acknowledged,
            records_failed=self.records_failed,
            records_ambiguous=self.records_ambiguous,
            record_retries=self.record_retries,
            batches_sent=self.batches_sent,
            bytes_sent=self.bytes_sent,
            average_batch_size=self.bytes_sent / self.batches_sent if self.batches_sent else 0.0,
            requests_sent=self.requests_sent,
            request_latency_p50=pct(0.5),
            request_latency_p99=pct(0.99),
            request_latency_max=ordered[-1] if ordered else 0.0,
            buffer_in_use=buffer_in_use,
            epoch_bumps=self.epoch_bumps,
            batch_splits=self.batch_splits,
        )
