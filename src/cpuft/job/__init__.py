"""Jobs: ``build`` puts a run together (recipe, plan, patches, batches) for ``cpuft train`` and
the benchmarks alike; ``train`` is the ``cpuft train`` job; ``outdir`` guards its folder."""
