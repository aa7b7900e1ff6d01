"""Run metrics: a do-nothing logger with sinks (metrics.jsonl, a progress bar or lines)."""

from cpuft.metrics.logger import (
    JsonlSink,
    LineProgressSink,
    MetricLogger,
    MetricSink,
    ProgressSink,
    Ticker,
    progress_sink,
)

__all__ = ["JsonlSink", "LineProgressSink", "MetricLogger", "MetricSink", "ProgressSink",
           "Ticker", "progress_sink"]
