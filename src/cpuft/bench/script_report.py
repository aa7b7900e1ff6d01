"""``cpuft bench --script``'s table, verdicts and chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCRIPT_COLUMNS = ("configuration", "ms a step", "steps/s", "threads", "allocator", "start-up s",
                  "vs plain")
PLAN_DECISIONS = ("precision", "bf16_weights", "fused_optimizer", "fast_dropout", "attention",
                  "fused_gelu", "relative_span", "dynamic_conv", "channels_last",
                  "first_token_layer", "counted_logits", "sparse_embeddings",
                  "embedding_rows")
"""The speed-ups of a plan that act on a script's model, in the order the report names them."""


def script_rows(report: dict[str, Any]) -> list[list[str]]:
    out = []
    for name, c in report["configs"].items():
        ratio = report["ratios"][name]
        spread = (f" ({min(ratio['rounds']):.2f}-{max(ratio['rounds']):.2f})"
                  if len(ratio["rounds"]) > 1 else "")
        out.append([name, f"{c['step_seconds'] * 1000:.1f}", f"{c['steps_per_second']:.2f}",
                    str(c["threads"]), c["allocator"], f"{c['warmup_seconds']:.1f}",
                    f"{ratio['median']:.2f}x{spread}"])
    return out


def script_verdicts(report: dict[str, Any]) -> list[str]:
    """What each configuration gained against the baseline, and what cpuft's speed-ups did."""
    base = report["baseline"]
    lines = []
    for name, ratio in report["ratios"].items():
        if name == base:
            continue
        low, high = min(ratio["rounds"]), max(ratio["rounds"])
        if len(ratio["rounds"]) > 1 and low <= 1 <= high:
            lines.append(f"{name}: {ratio['median']:.2f}x {base}, but its rounds ran "
                         f"{low:.2f}-{high:.2f}x: no difference this bench can tell")
        else:
            word = "faster than" if ratio["median"] >= 1 else "SLOWER than"
            lines.append(f"{name}: {ratio['median']:.2f}x, {word} {base}")
    cpuft = report["configs"].get("cpuft")
    if cpuft is not None:
        lines += plan_lines(cpuft.get("plan"))
    return lines


def plan_lines(plan: dict[str, Any] | None) -> list[str]:
    """What each speed-up of ``cpuft.optimize`` did in the script, with its reason."""
    if not plan:
        return ["cpuft: the script never called cpuft.optimize, so its row is cpuft launch's "
                "process set-up alone; add `model, optimizer = cpuft.optimize(model, optimizer)`"
                " and run the forward under `with cpuft.autocast(model):`"]
    lines = []
    for name in PLAN_DECISIONS:
        value, reason = plan.get(name), plan.get(f"{name}_reason", "")
        if isinstance(value, bool):
            value = "on" if value else "off"
        lines.append(f"cpuft.optimize {name.replace('_', ' ')}: {value} ({reason})")
    return lines


def script_markdown(report: dict[str, Any]) -> str:
    args = " ".join(report["args"])
    head = [f"# cpuft bench --script {report['script']} {args}".rstrip(), "",
            f"{report['cpu']}; {report['nproc']} process(es); {report['warmup_steps']} warm-up "
            f"and {report['steps']} measured optimizer steps a run; {report['rounds']} round(s), "
            "the median of each.", "",
            "| " + " | ".join(SCRIPT_COLUMNS) + " |", "|" + "---|" * len(SCRIPT_COLUMNS)]
    body = ["| " + " | ".join(row) + " |" for row in script_rows(report)]
    return "\n".join([*head, *body, "", *(f"- {line}" for line in script_verdicts(report)), ""])


def script_chart(report: dict[str, Any], path: Path) -> None:
    """Steps a second of each configuration, with its ratio to the baseline over the bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["configs"])
    speeds = [report["configs"][n]["steps_per_second"] for n in names]
    fig, ax = plt.subplots(figsize=(1.8 * len(names) + 2, 3.6))
    bars = ax.bar(names, speeds, color=["#9e9e9e" if n != "cpuft" else "#1f77b4" for n in names])
    for bar, name in zip(bars, names, strict=True):
        ax.annotate(f"{report['ratios'][name]['median']:.2f}x", (bar.get_x() + bar.get_width() / 2,
                    bar.get_height()), ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("optimizer steps / s")
    ax.set_ylim(0, max(speeds) * 1.18)
    ax.set_title(f"{report['script']} ({report['nproc']} process(es)): against "
                 f"{report['baseline']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
