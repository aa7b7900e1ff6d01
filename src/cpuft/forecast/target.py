"""The nodes a forecast is for: an instance of the price table or a node described by hand,
its link measured by ``cpuft cluster check`` or given, and the notes that say where each figure
comes from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cpuft.errors import CpuftError
from cpuft.forecast.calibration import Calibrated
from cpuft.forecast.comm import Link, link_from_cluster_check
from cpuft.forecast.model import ISA_SPEED, Target
from cpuft.forecast.prices import SHIPPED, load_prices

ASSUMED_LATENCY_S = 50e-6


@dataclass(frozen=True)
class NodeRequest:
    """What the user said of the nodes to rent: an instance by name, or cores and a link."""

    instance: str = ""
    prices: str = ""
    """A price table of the user's (default: cpuft's)."""
    cores: float = 0.0
    link_gbit: float = 0.0
    isa: str = ""
    """The nodes' ISA class (default: the calibrated node's)."""
    price_per_hour: float = 0.0
    latency_us: float = 0.0
    cluster_check: str = ""
    """The JSON file of ``cpuft cluster check --json`` on the nodes."""


def _measured_link(path: str) -> Link | None:
    if not path:
        return None
    try:
        return link_from_cluster_check(json.loads(Path(path).read_text()))
    except CpuftError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CpuftError(f"--cluster-check {path}: not a report of cpuft cluster check --json "
                         f"({type(e).__name__})") from None


def target_of(req: NodeRequest, calibrated_isa: str) -> tuple[Target, list[str]]:
    """The target nodes, and notes on what of them was assumed or where it was read."""
    notes = []
    link = _measured_link(req.cluster_check)
    latency = req.latency_us * 1e-6 if req.latency_us else (
        link.latency_s if link else ASSUMED_LATENCY_S)
    if not req.latency_us and not link:
        notes.append(f"latency: {ASSUMED_LATENCY_S * 1e6:.0f} us a hop (--latency-us or "
                     "--cluster-check for yours)")
    if req.instance:
        table = Path(req.prices) if req.prices else SHIPPED
        prices = load_prices(table)
        if req.instance not in prices:
            raise CpuftError(f"--instance {req.instance!r} is not in {table}: choose from "
                             f"{', '.join(sorted(prices))}")
        i = prices[req.instance]
        gbit = link.gbit if link else i.network_gbit
        if not link:
            notes.append(f"bandwidth: the {i.network_gbit:g} Gbit/s {i.name} is sold with")
        notes.append(f"prices: {i.cloud} {i.name} from {table.name} (taken {i.taken})")
        return Target(name=i.name, cores=i.cores, isa=i.isa,
                      link=Link(gbit, latency, link.source if link else "the price table"),
                      on_demand_per_hour=i.on_demand_per_hour,
                      spot_per_hour=i.spot_per_hour), notes
    chosen = req.isa or calibrated_isa
    if chosen not in ISA_SPEED:
        raise CpuftError(f"--isa {chosen!r}: choose from {', '.join(ISA_SPEED)}")
    gbit = req.link_gbit or (link.gbit if link else 0.0)
    return Target(name=f"{req.cores:g}-core node", cores=req.cores, isa=chosen,
                  link=Link(gbit, latency, link.source if link and not req.link_gbit
                            else "--link-gbit"),
                  on_demand_per_hour=req.price_per_hour or None), notes


def compute_notes(cal: Calibrated, target: Target) -> list[str]:
    """How the calibrated node's compute was carried over to the target's."""
    notes = []
    measured_isa = cal.calibration.isa
    if target.isa != measured_isa:
        ratio = ISA_SPEED[target.isa] / ISA_SPEED[measured_isa]
        notes.append(f"compute: one {target.isa} core trains {ratio:.2f}x as fast as the "
                     f"calibrated {measured_isa} one (cpuft's table, not measured: calibrate "
                     "on such a node for a measured figure)")
    timed, data = cal.calibration.tokens_per_sample, cal.data_tokens_per_sample
    if timed and data and abs(data / timed - 1) > 0.01:
        notes.append(f"compute: in proportion to tokens, the job's data holding {data:.1f} a "
                     f"sample where the timed steps held {timed:.1f}")
    if target.cores != cal.calibration.cores:
        notes.append(f"compute: scales with physical cores, {cal.calibration.cores:g} calibrated "
                     f"to {target.cores:g} (linear)")
    return notes
