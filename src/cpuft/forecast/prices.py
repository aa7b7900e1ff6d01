"""The price table: CPU instances with their cores, ISA class, network and hourly prices.

cpuft ships one (``prices.csv``, dated in its ``taken`` column); ``--prices FILE`` replaces it.
Lines that start with # are comments.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from cpuft.errors import CpuftError
from cpuft.forecast.model import ISA_SPEED

SHIPPED = Path(__file__).with_name("prices.csv")
COLUMNS = ("instance", "cloud", "physical_cores", "isa", "network_gbit",
           "on_demand_usd_per_hour", "spot_usd_per_hour", "taken")


@dataclass(frozen=True, slots=True)
class Instance:
    name: str
    cloud: str
    cores: int
    isa: str
    network_gbit: float
    on_demand_per_hour: float
    spot_per_hour: float | None
    taken: str


def _number(row: dict[str, str], column: str, where: str) -> float:
    try:
        value = float(row[column])
    except ValueError:
        raise CpuftError(f"{where}: {column} {row[column]!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise CpuftError(f"{where}: {column} must be positive, not {row[column]}")
    return value


def load_prices(path: Path = SHIPPED) -> dict[str, Instance]:
    """The instances of the table at ``path``, by name."""
    try:
        lines = [line for line in path.read_text().splitlines()
                 if line.strip() and not line.startswith("#")]
    except OSError as e:
        raise CpuftError(f"--prices {path}: cannot read it ({e.strerror})") from None
    except UnicodeDecodeError:
        raise CpuftError(f"--prices {path}: not a text file (a CSV table of prices)") from None
    reader = csv.DictReader(lines)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CpuftError(f"--prices {path}: no {missing[0]} column (the columns are "
                         f"{', '.join(COLUMNS)})")
    found = {}
    for n, row in enumerate(reader, start=2):
        where = f"--prices {path}, row {n}"
        if row["isa"] not in ISA_SPEED:
            raise CpuftError(f"{where}: isa {row['isa']!r} is not one of "
                             f"{', '.join(ISA_SPEED)}")
        spot = row["spot_usd_per_hour"].strip()
        found[row["instance"]] = Instance(
            name=row["instance"], cloud=row["cloud"],
            cores=int(_number(row, "physical_cores", where)), isa=row["isa"],
            network_gbit=_number(row, "network_gbit", where),
            on_demand_per_hour=_number(row, "on_demand_usd_per_hour", where),
            spot_per_hour=_number(row, "spot_usd_per_hour", where) if spot else None,
            taken=row["taken"])
    if not found:
        raise CpuftError(f"--prices {path}: no instances in it")
    return found
