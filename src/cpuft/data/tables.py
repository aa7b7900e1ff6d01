"""Read a table (CSV, TSV, JSON, JSONL, parquet) into a ``datasets.Dataset``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError, first_line

FORMATS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {"keep_default_na": False}),
    ".tsv": ("csv", {"sep": "\t", "keep_default_na": False}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
    ".parquet": ("parquet", {}),
}


def load_table(path: str | Path, column_names: tuple[str, ...] | None = None) -> Any:
    """One file as a Dataset. TSV is read without quote handling, as GLUE files need."""
    import datasets

    datasets.disable_progress_bars()
    # Parser failures become our one-line error; datasets would log them too.
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    p = Path(path)
    builder, kwargs = FORMATS.get(p.suffix.lower(), (None, {}))
    if builder is None:
        raise CpuftError(
            f"{p}: unknown file type {p.suffix or '(none)'}; use one of {', '.join(FORMATS)}"
        )
    if not p.is_file():
        raise CpuftError(f"{p}: no such file")
    if p.stat().st_size == 0:
        raise CpuftError(f"{p}: the file is empty")
    kwargs = dict(kwargs)
    if p.suffix.lower() == ".tsv":
        kwargs["quoting"] = csv.QUOTE_NONE
    if column_names:
        kwargs.update(column_names=list(column_names), header=None)
    try:
        ds = datasets.load_dataset(builder, data_files=str(p), split="train", **kwargs)
    except Exception as e:  # datasets wraps parser errors in several exception types
        cause = e.__cause__ or e
        if "corresponds to no data" in str(cause):  # datasets' words for a header alone
            raise CpuftError(f"{p}: the file has no rows (a header alone?)") from None
        raise CpuftError(f"{p}: cannot read it as {p.suffix[1:]}: {first_line(cause)}") \
            from None
    if len(ds) == 0:
        raise CpuftError(f"{p}: the file has no rows")
    return ds
