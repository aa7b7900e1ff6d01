"""What the checking commands share: JSON or tables, findings with coloured status, exit code."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError
from cpuft.paths import check_writable_dir

__all__ = ["check_writable_dir"]

STATUS_COLOURS = {"ok": "green", "warn": "yellow", "fail": "red"}


def emit(rep: dict[str, Any], as_json: bool, print_report: Callable[[dict[str, Any]], None]) -> int:
    """Print the report (one JSON document, or tables); exit code 1 unless it is ok."""
    if as_json:
        print(json.dumps(rep))
    else:
        print_report(rep)
    return 0 if rep["ok"] else 1


def print_table(title: str, columns: Sequence[str], rows: list[list[str]], lines: list[str],
                left: Sequence[str] = ()) -> None:
    """A table (the ``left`` columns aligned left, the rest right), then ``lines``."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="left" if c in left else "right")
    for r in rows:
        table.add_row(*r)
    console = Console(width=max(Console().width, 110))
    console.print(table)
    for line in lines:
        console.print(line, highlight=False)


def findings_table(title: str, findings: list[dict[str, Any]], with_host: bool = False) -> Any:
    from rich.table import Table

    table = Table(title=title)
    columns = (("host",) if with_host else ()) + ("check", "status", "detail", "fix")
    for col in columns:
        table.add_column(col)
    for f in findings:
        status = f"[{STATUS_COLOURS[f['status']]}]{f['status']}[/]"
        cells = [f["check"], status, f["detail"], f["fix"]]
        table.add_row(*([f["host"]] if with_host else []), *cells)
    return table


def write_file(path: str, text: str, flag: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise CpuftError(f"{flag} {path}: cannot write it ({e.strerror})") from None
