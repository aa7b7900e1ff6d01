"""Measured torch.compile costs and gains, kept per machine, model and precision.

``cpuft bench --configs cpuft,cpuft-compile`` writes them; ``cpuft train --compile auto`` reads
them to decide whether compiling pays for a run of a given length. No torch here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(kw_only=True, slots=True)
class CompileMeasurement:
    eager_seconds_per_sample: float
    compiled_seconds_per_sample: float
    compile_seconds: float
    """Extra time of the compiled run's first steps over its steady pace."""

    @property
    def speedup(self) -> float:
        return self.eager_seconds_per_sample / self.compiled_seconds_per_sample


def cache_path() -> Path:
    root = Path(os.environ.get("CPUFT_CACHE", Path.home() / ".cache" / "cpuft"))
    return root / "compile.json"


def model_key(name: str) -> str:
    """The default model is 'minilm' (as in ``cpuft bench``); folders by absolute path."""
    if not name:
        return "minilm"
    path = Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() else name


def key(*, cpu: str, model: str, precision: str, max_seq_length: int, torch_version: str) -> str:
    return f"{cpu}|{model_key(model)}|{precision}|{max_seq_length}|torch {torch_version}"


def _read(path: Path) -> dict[str, Any]:
    """The cache's entries; a damaged file reads as empty (and is rewritten by ``store``)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(k: str, path: Path | None = None) -> CompileMeasurement | None:
    entry = _read(path or cache_path()).get(k)
    try:
        return CompileMeasurement(**entry) if isinstance(entry, dict) else None
    except TypeError:  # an entry of another shape: as good as none
        return None


def store(k: str, m: CompileMeasurement, path: Path | None = None) -> None:
    path = path or cache_path()
    data = _read(path)
    data[k] = asdict(m)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
