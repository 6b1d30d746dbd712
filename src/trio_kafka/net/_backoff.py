"""The shell's name for the one backoff: `ExponentialBackoff` lives in the sans-IO core
(producer/_backoff.py, KIP-580 as Java computes it); reconnects use it with
`reconnect_backoff` and `reconnect_backoff_max`, every other retry with `retry_backoff`
and `retry_backoff_max`. The draw comes from the selector's injected rng."""

from __future__ import annotations

from trio_kafka.producer import ExponentialBackoff

__all__ = ["ExponentialBackoff"]
