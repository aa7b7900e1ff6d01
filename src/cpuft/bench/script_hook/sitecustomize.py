"""Times a training script's optimizer steps for ``cpuft bench --script``, without editing it.

Python imports this module at start-up when its folder is on PYTHONPATH. Once the script imports
``torch.optim``, a global optimizer-step hook marks the end of every step of the first optimizer
that steps. After ``CPUFT_BENCH_STEPS`` = "WARMUP,MEASURED" steps the rank writes its marks (and
cpuft's speed plan, where the script called ``cpuft.optimize``) to
``$CPUFT_BENCH_OUT/rank<RANK>.json`` and leaves at once: the bench needs nothing more of it.

It loads only the standard library until torch is imported, and then hands over to any other
``sitecustomize`` on the path, so that a script's environment stays as it was.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
from typing import Any

STARTED = time.perf_counter()
WATCHED = "torch.optim.optimizer"


class _Clock:
    def __init__(self, warmup: int, measured: int, out: str) -> None:
        self.warmup, self.measured, self.out = warmup, measured, out
        self.marks: list[float] = []
        self.optimizer: int | None = None

    def ended_early(self) -> None:
        """The script ended before the measured steps: say how many it took."""
        _write(self.out, "partial.json", {"steps": len(self.marks)})

    def step_done(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        # A wrapper optimizer (cpuft's bf16 one) steps an inner one: the one that finishes
        # first each step is counted, the same object every step.
        if self.optimizer is None:
            self.optimizer = id(optimizer)
            atexit.register(self.ended_early)
        if id(optimizer) != self.optimizer:
            return
        self.marks.append(time.perf_counter())
        if len(self.marks) >= self.warmup + self.measured:
            self.finish()

    def finish(self) -> None:
        import torch

        marks = self.marks
        start = self.warmup - 1  # the mark that ends the last warm-up step
        record = {
            "step_seconds": [b - a for a, b in zip(marks[start:], marks[start + 1:], strict=False)],
            "warmup_seconds": marks[start] - STARTED,
            "threads": torch.get_num_threads(),
            "ld_preload": os.environ.get("LD_PRELOAD", ""),
            "plan": _cpuft_plan(),
        }
        _write(self.out, "json", record)
        sys.stdout.flush()
        sys.stderr.flush()
        # The steps are measured; the rest of the script (and torch's teardown) is not.
        os._exit(0)


def _write(out: str, suffix: str, record: dict[str, Any]) -> None:
    path = os.path.join(out, f"rank{os.environ.get('RANK', '0')}.{suffix}")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def _cpuft_plan() -> dict[str, Any] | None:
    module = sys.modules.get("cpuft.api.optimize")
    return module.latest_plan() if module is not None else None


class _AfterOptimizerImport(importlib.abc.MetaPathFinder):
    """Registers the clock's hook once ``torch.optim.optimizer`` has run."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != WATCHED:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module
        clock = self.clock

        def exec_module(module: Any) -> None:
            run_module(module)
            module.register_optimizer_step_post_hook(clock.step_done)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _install() -> None:
    steps, out = os.environ.get("CPUFT_BENCH_STEPS", ""), os.environ.get("CPUFT_BENCH_OUT", "")
    if not steps or not out:
        return
    warmup, measured = (int(n) for n in steps.split(","))
    sys.meta_path.insert(0, _AfterOptimizerImport(_Clock(warmup, measured, out)))


def _next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_install()
_next_sitecustomize()
