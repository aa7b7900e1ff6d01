"""A calibration read from what cpuft wrote: a run folder's summary.json (its
``forecast_inputs``), or the file ``cpuft plan --calibrate`` writes. What the file does not hold
is assumed, and each assumption is named."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError
from cpuft.forecast.comm import Link, ring_allreduce_seconds
from cpuft.forecast.model import ISA_SPEED, Calibration

FIXED_SHARE = 0.1
"""Assumed share of a calibrated step that does not shrink with its batch, where one batch
size was measured."""
HIDDEN_SHARE = 0.3
"""Assumed share of the communication DDP hides behind the backward pass, where no run of
several nodes was measured."""


@dataclass(frozen=True)
class Calibrated:
    """A calibration with what was measured and what was assumed, in words."""

    calibration: Calibration
    samples_per_step: int
    """The calibrated step's samples, on its node."""
    measured: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    recipe: str = ""
    model: str = ""
    nodes: int = 1
    comm_wait_seconds: float = 0.0
    """What a step of the calibrated run waited on communication, with ``nodes`` nodes."""

    def on_link(self, link: Link) -> Calibrated:
        """With the hidden share of communication this run measured, if it ran on several
        nodes over ``link``; as it is (the share assumed) otherwise."""
        raw = ring_allreduce_seconds(self.calibration.dense_gradient_bytes, self.nodes, link)
        if self.nodes < 2 or raw <= 0:
            return self
        hidden = min(max(1 - self.comm_wait_seconds / raw, 0.0), 1.0)
        return replace(
            self, calibration=replace(self.calibration, hidden_share=hidden),
            measured=[*self.measured, f"hidden communication: {hidden:.0%} (waited "
                      f"{self.comm_wait_seconds:.3f} s a step of the {raw:.3f} s the link "
                      "needs)"],
            assumed=[a for a in self.assumed if not a.startswith("hidden communication")])


def _inputs(path: Path) -> tuple[dict[str, Any], Path]:
    file = path / "summary.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except OSError as e:
        raise CpuftError(f"--calibration {path}: cannot read {file.name} ({e.strerror})") from None
    except ValueError:
        raise CpuftError(f"--calibration {file}: not JSON") from None
    inputs = data.get("forecast_inputs") if isinstance(data, dict) else None
    if not isinstance(inputs, dict):
        raise CpuftError(f"--calibration {file}: no forecast_inputs in it (a summary.json of "
                         "cpuft train, or the file cpuft plan --calibrate writes)")
    return inputs, file


def _number(inputs: dict[str, Any], key: str, file: Path) -> float:
    value = inputs.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise CpuftError(f"--calibration {file}: forecast_inputs.{key} is missing or not a "
                         "number of at least 0")
    return float(value)


def read_calibration(path: Path) -> Calibrated:
    """The calibration in ``path``, with the hidden share of communication assumed (see
    ``Calibrated.on_link``)."""
    inputs, file = _inputs(path)
    step = _number(inputs, "seconds_per_step", file)
    samples = _number(inputs, "samples_per_step", file)
    if step <= 0 or samples <= 0:
        raise CpuftError(f"--calibration {file}: a step of no time or no samples")
    isa = str(inputs.get("isa", ""))
    if isa not in ISA_SPEED:
        raise CpuftError(f"--calibration {file}: forecast_inputs.isa {isa!r} is not one of "
                         f"{', '.join(ISA_SPEED)}")
    nodes = int(_number(inputs, "nodes", file) or 1)
    comm_wait = _number(inputs, "comm_wait_fraction", file) * step
    compute = step - comm_wait
    cores = _number(inputs, "physical_cores", file)
    where = f"{file} ({nodes} node{'s' if nodes > 1 else ''}, {cores:g} cores, {isa})"
    measured = [f"compute: {compute:.3f} s a step of {samples:g} samples a node, measured in "
                f"{where}"]
    assumed = []
    if "half_batch_seconds" in inputs:
        half = _number(inputs, "half_batch_seconds", file)
        per_sample = max(compute - half, 0.0) / (samples / 2)
        fixed = max(compute - per_sample * samples, 0.0)
        measured.append(f"fixed work a step: {fixed:.3f} s (the step timed at half its batch)")
    else:
        fixed = FIXED_SHARE * compute
        per_sample = (compute - fixed) / samples
        assumed.append(f"fixed work a step: {FIXED_SHARE:.0%} of the calibrated step "
                       "(one batch size measured: cpuft plan --calibrate times two)")
    cal = Calibration(
        seconds_per_sample=per_sample, fixed_seconds=fixed, cores=cores, isa=isa,
        dense_gradient_bytes=_number(inputs, "dense_gradient_bytes", file),
        sparse_gradient_bytes=float(inputs.get("sparse_gradient_bytes", 0.0) or 0.0),
        hidden_share=HIDDEN_SHARE)
    measured.append(f"gradients: {cal.dense_gradient_bytes / 1e6:.1f} MB dense"
                    + (f" and {cal.sparse_gradient_bytes / 1e6:.2f} MB of sparse rows"
                       if cal.sparse_gradient_bytes else "") + " a step")
    assumed.append(f"hidden communication: {HIDDEN_SHARE:.0%} of it behind the backward pass "
                   "(the calibration ran on one node)")
    return Calibrated(cal, int(samples), measured, assumed, recipe=str(inputs.get("recipe", "")),
                      model=str(inputs.get("model", "")), nodes=nodes,
                      comm_wait_seconds=comm_wait)
