"""The public API for a model and a loop of your own: ``cpuft.optimize``, ``cpuft.autocast``,
``cpuft.fit`` and ``cpuft.report_plan`` (exported from ``cpuft``)."""
