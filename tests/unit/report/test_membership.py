"""cpuft report marks an elastic job's changes of membership: a table, and lines on the loss
chart at the steps where its world changed."""

from __future__ import annotations

import json

from cpuft.report.document import write_report
from cpuft.report.runs import read_run

CHANGES = [
    {"time": "2026-12-06T20:00:30Z", "step": 40, "world_size_before": 3, "world_size_after": 2,
     "steps_trained_again": 4},
    {"time": "2026-12-06T20:00:57Z", "step": 70, "world_size_before": 2, "world_size_after": 3,
     "steps_trained_again": 0},
]


def _run(folder, membership):
    folder.mkdir(parents=True)
    summary = {"model": "m", "task": "t", "precision": "bf16", "nodes": 3, "world_size": 3,
               "train_samples_per_second": 100.0, "train_seconds": 60.0,
               "eval": {"accuracy": 0.9}, "membership": membership}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 1.0 / s, "samples_per_second": 90.0, "seconds": s / 2})
        + "\n" for s in range(10, 101, 10)))
    return read_run(folder)


def test_the_changes_are_listed_and_drawn_where_they_happened(tmp_path):
    elastic = _run(tmp_path / "a" / "spot", [*CHANGES, {"step": "broken"}])
    assert elastic.membership == CHANGES  # a malformed change is left out
    write_report([elastic], tmp_path / "with", None)
    md = (tmp_path / "with" / "report.md").read_text()
    assert "## Changes of membership (elastic jobs)" in md
    assert "| spot | 2026-12-06T20:00:30Z | 40 | 3 → 2 | 4 |" in md
    assert "| spot | 2026-12-06T20:00:57Z | 70 | 2 → 3 | 0 |" in md
    calm = _run(tmp_path / "b" / "spot", [])  # the same name: the same legend
    write_report([calm], tmp_path / "without", None)
    assert "Changes of membership" not in (tmp_path / "without" / "report.md").read_text()
    # the same curve, but the lines at steps 40 and 70 and their labels: other pixels
    assert (tmp_path / "with" / "loss.png").read_bytes() != \
        (tmp_path / "without" / "loss.png").read_bytes()
