"""The comparison of a bench's results: per model, each configuration's figures, cpuft's
speed-ups and quality against each other way, its FLOP utilisation, and the rounds a busy
machine touched."""

from __future__ import annotations

import statistics
from typing import Any

from cpuft.bench.spec import VARIANTS
from cpuft.bench.steal import BUSY_WARN
from cpuft.bench.utilisation import Peak, nominal_flops

SCORES = ("accuracy", "test_accuracy", "eval_loss")
"""The quality figures a run reports, compared as means where rounds give several."""


def score(config: dict[str, Any], name: str) -> float:
    """A configuration's ``name`` score: the mean over its seeds where rounds had several."""
    return float(config.get(f"mean_{name}", config[name]))


def measured_peaks(results: list[dict[str, Any]], matmul: dict[str, float]) -> dict[str, float]:
    """Per number format, the machine's measured peak: the best matmul the bench timed, at the
    square shape or at any model's own shapes. A run's own rate never raises it."""
    peaks = {"bf16": matmul["bf16_gflops"], "fp32": matmul["fp32_gflops"]}
    for r in results:
        peaks[r["precision"]] = max(peaks.get(r["precision"], 0.0),
                                    r.get("peak_gflops_model_shapes", 0.0))
    return peaks


STOCK_COUNT = ("trainer-best", "stock-2021", "plain-best", "plain-fp32")
"""The configurations whose model is the stock one, in the order their FLOP count is taken."""


def one_nominal_count(configs: dict[str, dict[str, Any]]) -> None:
    """Give every configuration of a model the stock model's nominal FLOPs at its own tokens
    a sample: a patch that skips modules (cpuft's first-token layer) must not lower cpuft's.
    Where no stock configuration ran (``--configs cpuft``), each keeps its own count."""
    stock = next((configs[c] for c in STOCK_COUNT if "weight_uses" in configs.get(c, {})), None)
    if stock is None:
        return
    for c in configs.values():
        if "weight_uses" in c:
            c["flops_per_sample"] = nominal_flops(stock["weight_uses"],
                                                  stock["attention_coefficient"],
                                                  c["tokens_per_sample"])


def utilisation(config: dict[str, Any], peak: float, theoretical: float) -> None:
    """The configuration's FLOP figures against both peaks (GFLOP/s); executed FLOPs above the
    measured peak are flagged, never hidden by raising the peak."""
    rate = config["flops_per_sample"] * config["samples_per_second"] / 1e9
    config["mfu"] = rate / peak
    if theoretical:
        config["mfu_theoretical"] = rate / theoretical
    if "executed_flops_per_sample" in config:
        executed = config["executed_flops_per_sample"] * config["samples_per_second"] / 1e9
        config["executed_gflops"] = executed
        config["hfu"] = executed / peak
        config["above_measured_peak"] = executed > peak
        if theoretical:
            config["hfu_theoretical"] = executed / theoretical
        config["skipped_flops_fraction"] = 1 - config["executed_flops_per_sample"] / config[
            "flops_per_sample"]


def compare(results: list[dict[str, Any]], matmul: dict[str, float],
            theoretical: dict[str, Peak] | None = None) -> dict[str, Any]:
    """Per model: each configuration's numbers, cpuft's speed-ups and its FLOP utilisation."""
    peaks = measured_peaks(results, matmul)
    theoretical = theoretical or {}
    report: dict[str, Any] = {
        "matmul_gflops": {"bf16": matmul["bf16_gflops"], "fp32": matmul["fp32_gflops"]},
        "peak_gflops": peaks,
        "theoretical_peak_gflops": {k: p.gflops for k, p in theoretical.items()},
        "theoretical_peak_basis": {k: p.basis for k, p in theoretical.items()},
        "models": {}}
    for r in results:
        entry = report["models"].setdefault(r["model"], {"configs": {}})
        entry["configs"][r["config"]] = {k: r[k] for k in (
            "samples_per_second", "tokens_per_second", "tokens_per_sample", "peak_memory_mb",
            "precision", "allocator", "threads", "train_seconds")}
        config = entry["configs"][r["config"]]
        config["precision_reason"] = r.get("precision_reason", "")
        config["steal_fraction"] = r.get("steal_fraction", 0.0)
        config["others_fraction"] = r.get("others_fraction", 0.0)
        for key in ("accuracy", "test_accuracy", "eval_loss", "eval_perplexity",
                    "train_peak_memory_mb",
                    "train_loss", "plan", "flops_per_sample", "executed_flops_per_sample",
                    "peak_gflops_model_shapes", "weight_uses", "attention_coefficient", "cpus",
                    "pinned", "started", "seed"):
            if key in r:
                config[key] = r[key]
    for entry in report["models"].values():
        one_nominal_count(entry["configs"])
        for name, config in entry["configs"].items():
            fmt = config["precision"]
            utilisation(config, peaks[fmt], theoretical[fmt].gflops if fmt in theoretical
                        else 0.0)
            if name == "cpuft":
                for key in ("mfu", "hfu", "skipped_flops_fraction", "mfu_theoretical",
                            "hfu_theoretical", "above_measured_peak", "executed_gflops"):
                    if key in config:
                        entry[key] = config[key]
    for r in results:
        if r["config"] == "cpuft" and r.get("profile"):
            report["models"][r["model"]]["profile"] = r["profile"]
    for r in results:
        if "rounds_samples_per_second" in r:
            config = report["models"][r["model"]]["configs"][r["config"]]
            config["rounds_samples_per_second"] = r["rounds_samples_per_second"]
            if "rounds_tokens_per_second" in r:
                config["rounds_tokens_per_second"] = r["rounds_tokens_per_second"]
            for key in ("rounds_steal_fraction", "rounds_others_fraction", "rounds_seed",
                        *(f"rounds_{name}" for name in SCORES)):
                if key in r:
                    config[key] = r[key]
            if len(set(r.get("rounds_seed", []))) < 2:
                continue  # rounds of one seed train alike: one accuracy, not a mean
            for name in SCORES:
                each = [v for v in r.get(f"rounds_{name}", []) if v == v]  # not NaN
                if len(each) > 1:
                    config[f"mean_{name}"] = statistics.fmean(each)
    for entry in report["models"].values():
        configs = entry["configs"]
        if "cpuft" not in configs:
            continue
        for other in ("stock-2021", "trainer-best", "trainer-compile", "plain-fp32",
                      "plain-best"):
            if other not in configs:
                continue
            key = "speedup_vs_" + other.replace("-", "_")
            # Real tokens per second: stock-2021's random batches hold other samples, of
            # other lengths, than cpuft's (the other stock ways train on cpuft's batches).
            entry[key] = median_ratio(configs["cpuft"], configs[other])
            for name in ("accuracy", "test_accuracy"):
                if name in configs[other] and name in configs["cpuft"]:
                    # Over every seed where there were several (--seed-each-round): the
                    # quality of one run swings more than its speed.
                    entry[key.replace("speedup", f"{name}_delta")] = (
                        score(configs["cpuft"], name) - score(configs[other], name))
        entry["busy_rounds"] = busy_rounds(configs)
        gains = {name: median_ratio(configs["cpuft"], configs[name])
                 for name in VARIANTS if name in configs}
        if gains:
            entry["gain_over_variant"] = gains
        best = configs.get("plain-best", {})
        if "train_loss" in best:
            entry["train_loss_change_vs_plain_best"] = (
                configs["cpuft"]["train_loss"] / best["train_loss"] - 1)
        stock = configs.get("trainer-best", {})
        if "eval_loss" in stock:
            entry["eval_loss_change_vs_trainer_best"] = (
                score(configs["cpuft"], "eval_loss") / score(stock, "eval_loss") - 1)
            for key in ("peak_memory_mb", "train_peak_memory_mb"):
                entry[key.replace("_mb", "_vs_trainer_best")] = configs["cpuft"][key] / stock[key]
    return report


def median_ratio(ours: dict[str, Any], theirs: dict[str, Any]) -> float:
    """The median over rounds of one configuration's real tokens/s over another's, each round
    against its own."""
    a = ours.get("rounds_tokens_per_second", [ours["tokens_per_second"]])
    b = theirs.get("rounds_tokens_per_second", [theirs["tokens_per_second"]])
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def busy_rounds(configs: dict[str, dict[str, Any]]) -> list[int]:
    """The rounds (from 0) during which other processes took ``BUSY_WARN`` of the machine or
    more in some configuration's run: their ratios were measured on a busy machine."""
    rounds: set[int] = set()
    for c in configs.values():
        each = c.get("rounds_others_fraction") or [c.get("others_fraction", 0.0)]
        rounds.update(i for i, share in enumerate(each) if share >= BUSY_WARN)
    return sorted(rounds)


def faster_matmul(*measured: dict[str, float]) -> dict[str, float]:
    """Per number format, the fastest of the matmul measurements. A VM's speed drifts: a peak
    taken in a slow moment would put the utilisation of a run in a fast one above 100%."""
    return {key: max(m[key] for m in measured) for key in ("bf16_gflops", "fp32_gflops")}


def median_run(done: list[dict[str, Any]], speed: str = "samples_per_second") -> dict[str, Any]:
    """The run of median ``speed`` among one configuration's rounds, with every round's speeds."""
    if len(done) == 1:
        return done[0]
    ranked = sorted(done, key=lambda r: r[speed])
    return {**ranked[(len(ranked) - 1) // 2],
            "rounds_samples_per_second": [r["samples_per_second"] for r in done],
            f"rounds_{speed}": [r[speed] for r in done],
            "rounds_steal_fraction": [r.get("steal_fraction", 0.0) for r in done],
            "rounds_others_fraction": [r.get("others_fraction", 0.0) for r in done],
            **{f"rounds_{k}": [r[k] for r in done] for k in (*SCORES, "seed")
               if all(k in r for r in done)}}


