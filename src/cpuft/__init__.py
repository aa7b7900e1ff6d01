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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # their real signatures for type checkers and editors; loaded lazily below
    from cpuft import distributed as distributed
    from cpuft.api.fit import fit as fit
    from cpuft.api.optimize import autocast as autocast
    from cpuft.api.optimize import optimize as optimize
    from cpuft.api.optimize import report_plan as report_plan

__version__ = "0.1.0"
_API = {"optimize": "cpuft.api.optimize", "autocast": "cpuft.api.optimize",
        "report_plan": "cpuft.api.optimize", "fit": "cpuft.api.fit"}
__all__ = [*_API, "distributed"]


if not TYPE_CHECKING:  # hidden from type checkers, which would take every name for Any

    def __getattr__(name: str) -> Any:
        import importlib

        if name in _API:
            return getattr(importlib.import_module(_API[name]), name)
        if name == "distributed":
            return importlib.import_module("cpuft.distributed")
        raise AttributeError(f"module 'cpuft' has no attribute {name!r}")
