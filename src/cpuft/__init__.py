"""cpuft: fast fine-tuning of PyTorch models on CPU servers and CPU clusters.

For a model and loop of your own::

    model, optimizer = cpuft.optimize(model, optimizer)
    with cpuft.autocast():
        loss = loss_fn(model(x), y)

``cpuft.fit`` trains any module on any iterable of batches, with checkpoints and resume;
``cpuft.distributed.init()`` joins the job ``cpuft launch`` started. Importing cpuft loads no
torch: these names load on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
_API = {"optimize": "cpuft.api.optimize", "autocast": "cpuft.api.optimize",
        "report_plan": "cpuft.api.optimize", "fit": "cpuft.api.fit"}
__all__ = [*_API, "distributed"]


def __getattr__(name: str) -> Any:
    import importlib

    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    if name == "distributed":
        return importlib.import_module("cpuft.distributed")
    raise AttributeError(f"module 'cpuft' has no attribute {name!r}")
