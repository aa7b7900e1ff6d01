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
size was timed."""
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
    data_tokens_per_sample: float = 0.0
    """Real tokens a sample of the calibrated job's whole training data holds (0: unknown)."""
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

    def hiding_as(self, other: Calibrated, link: Link) -> Calibrated:
        """With the hidden share ``other`` (a run of several nodes of the same job) measured on
        ``link``."""
        if other.nodes < 2:
            raise CpuftError("the run to take the hidden share of communication from ran on "
                             "one node: give a run of several nodes")
        measured = other.on_link(link)
        return replace(
            self, calibration=replace(self.calibration,
                                      hidden_share=measured.calibration.hidden_share),
            measured=[*self.measured, *measured.measured[-1:]],
            assumed=[a for a in self.assumed if not a.startswith("hidden communication")])


def _inputs(path: Path, flag: str) -> tuple[dict[str, Any], Path]:
    file = path / "summary.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except OSError as e:
        raise CpuftError(f"{flag} {path}: cannot read {file.name} ({e.strerror})") from None
    except ValueError:
        raise CpuftError(f"{flag} {file}: not JSON") from None
    inputs = data.get("forecast_inputs") if isinstance(data, dict) else None
    if not isinstance(inputs, dict):
        raise CpuftError(f"{flag} {file}: no forecast_inputs in it (a summary.json of "
                         "cpuft train, or the file cpuft plan --calibrate writes)")
    return inputs, file


def _number(inputs: dict[str, Any], key: str, file: Path, flag: str) -> float:
    value = inputs.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise CpuftError(f"{flag} {file}: forecast_inputs.{key} is missing or not a "
                         "number of at least 0")
    return float(value)


def read_calibration(path: Path, flag: str = "--calibration") -> Calibrated:
    """The calibration in ``path``, with the hidden share of communication assumed (see
    ``Calibrated.on_link``)."""
    inputs, file = _inputs(path, flag)
    step = _number(inputs, "seconds_per_step", file, flag)
    samples = _number(inputs, "samples_per_step", file, flag)
    if step <= 0 or samples <= 0:
        raise CpuftError(f"{flag} {file}: a step of no time or no samples")
    isa = str(inputs.get("isa", ""))
    if isa not in ISA_SPEED:
        raise CpuftError(f"{flag} {file}: forecast_inputs.isa {isa!r} is not one of "
                         f"{', '.join(ISA_SPEED)}")
    nodes = int(_number(inputs, "nodes", file, flag) or 1)
    comm_wait = _number(inputs, "comm_wait_fraction", file, flag) * step
    compute = step - comm_wait
    cores = _number(inputs, "physical_cores", file, flag)
    where = f"{file} ({nodes} node{'s' if nodes > 1 else ''}, {cores:g} cores, {isa})"
    tokens = float(inputs.get("tokens_per_sample", 0.0) or 0.0)
    held = f" ({tokens:.1f} tokens a sample)" if tokens else ""
    measured = [f"compute: {compute:.3f} s a step of {samples:g} samples a node{held}, measured "
                f"in {where}"]
    assumed = []
    steps = [(samples, compute)]
    timed = inputs.get("step_seconds_by_batch") or {}
    if not isinstance(timed, dict):
        raise CpuftError(f"{flag} {file}: step_seconds_by_batch is not a table")
    for size, seconds in timed.items():
        try:
            point = (float(size), float(seconds))
        except (TypeError, ValueError):
            raise CpuftError(f"{flag} {file}: step_seconds_by_batch has {size!r}: "
                             f"{seconds!r}") from None
        if point[0] > 0 and point[0] != samples:
            steps.append(point)
    if len(steps) > 1:
        measured.append("steps also timed at " + ", ".join(
            f"{b:g} samples ({t:.3f} s)" for b, t in sorted(steps) if b != samples))
    else:
        steps.append((0.0, FIXED_SHARE * compute))
        assumed.append(f"fixed work a step: {FIXED_SHARE:.0%} of the calibrated step, the rest "
                       "in proportion to its samples (one batch size timed: cpuft plan "
                       "--calibrate times several)")
    cal = Calibration(
        steps=tuple(sorted(steps)), cores=cores, isa=isa,
        dense_gradient_bytes=_number(inputs, "dense_gradient_bytes", file, flag),
        sparse_gradient_bytes=float(inputs.get("sparse_gradient_bytes", 0.0) or 0.0),
        hidden_share=HIDDEN_SHARE,
        tokens_per_sample=tokens)
    measured.append(f"gradients: {cal.dense_gradient_bytes / 1e6:.1f} MB dense"
                    + (f" and {cal.sparse_gradient_bytes / 1e6:.2f} MB of sparse rows"
                       if cal.sparse_gradient_bytes else "") + " a step")
    assumed.append(f"hidden communication: {HIDDEN_SHARE:.0%} of it behind the backward pass "
                   "(the calibration ran on one node)")
    return Calibrated(cal, int(samples), measured, assumed, recipe=str(inputs.get("recipe", "")),
                      model=str(inputs.get("model", "")), nodes=nodes,
                      data_tokens_per_sample=float(inputs.get("data_tokens_per_sample", 0.0)
                                                   or 0.0),
                      comm_wait_seconds=comm_wait)
