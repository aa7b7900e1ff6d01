"""Run metrics: a do-nothing logger with sinks (metrics.jsonl, a progress bar)."""

from cpuft.metrics.logger import JsonlSink, MetricLogger, MetricSink, ProgressSink

__all__ = ["JsonlSink", "MetricLogger", "MetricSink", "ProgressSink"]
