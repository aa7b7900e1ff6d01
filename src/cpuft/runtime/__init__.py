"""The one set-up of a training process (``start``), shared by ``cpuft train``, ``cpuft.fit``,
``cpuft.optimize`` and every benchmark."""

from cpuft.runtime.start import Runtime, preview, start

__all__ = ["Runtime", "preview", "start"]
