"""The engine: trains any ``nn.Module`` and knows nothing of tasks or model libraries.
``fit`` (the loop), ``step`` (one optimizer step, shared with the benchmarks), ``checkpoint``,
``signals`` (stopping between steps), ``process`` (threads and pinning of this process)."""
