import json

import pytest

from cpuft.bench.compare import compare
from cpuft.bench.report import bar_chart, markdown, rows
from cpuft.bench.runner import BenchOptions, plan_runs
from cpuft.errors import CpuftError


def result(config, sps, acc, precision="bf16", tokens_per_sample=30.0):
    return {"config": config, "model": "minilm", "samples_per_second": sps,
            "tokens_per_second": sps * tokens_per_sample, "tokens_per_sample": tokens_per_sample,
            "peak_memory_mb": 1500.0, "accuracy": acc,
            "precision": precision, "allocator": "system", "threads": 2, "train_seconds": 10.0,
            "flops_per_sample": 2e9}


MATMUL = {"bf16_gflops": 1000.0, "fp32_gflops": 200.0}


def test_compare_speedups_and_mfu():
    report = compare([result("stock-2021", 20.0, 0.80, "fp32"), result("trainer-best", 100.0, 0.81),
                      result("cpuft", 200.0, 0.805)], MATMUL)
    m = report["models"]["minilm"]
    assert m["speedup_vs_stock_2021"] == pytest.approx(10.0)
    assert m["speedup_vs_trainer_best"] == pytest.approx(2.0)
    assert m["accuracy_delta_vs_trainer_best"] == pytest.approx(-0.005)
    assert m["mfu"] == pytest.approx(2e9 * 200.0 / 1e12)
    assert json.loads(json.dumps(report)) == report


def test_speedups_count_tokens_not_samples():
    """Over part of an epoch trainer-best's sampler may hand it shorter samples: 100 samples/s
    of 25 tokens is 2500 tokens/s, and cpuft's 150 samples/s of 27 tokens 4050, 1.62x."""
    report = compare([result("trainer-best", 100.0, 0.81, tokens_per_sample=25.0),
                      result("cpuft", 150.0, 0.81, tokens_per_sample=27.0)], MATMUL)
    assert report["models"]["minilm"]["speedup_vs_trainer_best"] == pytest.approx(1.62)


def test_tables_and_chart(tmp_path):
    report = compare([result("stock-2021", 20.0, 0.80, "fp32"), result("cpuft", 90.0, 0.81)],
                     MATMUL)
    report["targets"] = {"speedup_vs_stock_2021": 3.0}
    assert rows(report)[1][-1] == "4.50x"
    md = markdown(report)
    assert "| minilm | cpuft | bf16 | system, 2 threads, unpinned | 90.0 |" in md
    assert "target 3.0x: met" in md
    bar_chart(report, tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_runs_same_shape_for_every_configuration():
    runs = plan_runs(BenchOptions(models=["minilm"], quick=True))
    assert [r.config for r in runs] == ["stock-2021", "trainer-best", "cpuft"]
    assert len({(r.steps, r.batch_size, r.max_seq_length) for r in runs}) == 1
    with pytest.raises(CpuftError, match="unknown configuration"):
        plan_runs(BenchOptions(configs=["ipex"]))


def test_loop_models_run_their_own_three_configurations():
    runs = plan_runs(BenchOptions(models=["minilm", "cnn", "rnn"], quick=True))
    assert [(r.model, r.config) for r in runs] == [
        ("minilm", "stock-2021"), ("minilm", "trainer-best"), ("minilm", "cpuft"),
        ("cnn", "plain-fp32"), ("cnn", "plain-best"), ("cnn", "cpuft"),
        ("rnn", "plain-fp32"), ("rnn", "plain-best"), ("rnn", "cpuft")]
    cnn = [r for r in runs if r.model == "cnn"]
    assert {r.image_size for r in cnn} == {64} and [r.profile_steps for r in cnn] == [0, 0, 2]
    picked = plan_runs(BenchOptions(models=["minilm", "cnn"], configs=["cpuft"], quick=True))
    assert [(r.model, r.config) for r in picked] == [("minilm", "cpuft"), ("cnn", "cpuft")]
    with pytest.raises(CpuftError, match="cnn runs none of stock-2021"):
        plan_runs(BenchOptions(models=["cnn"], configs=["stock-2021"]))


def test_loop_models_compare_against_both_plain_loops(tmp_path):
    def loop(config, sps, loss):
        return {**result(config, sps, 0.0, "fp32", tokens_per_sample=1.0), "model": "cnn",
                "train_loss": loss}

    for r in (runs := [loop("plain-fp32", 10.0, 2.0), loop("plain-best", 20.0, 2.0),
                       loop("cpuft", 25.0, 2.1)]):
        del r["accuracy"]
    report = compare(runs, MATMUL)
    report["targets"] = {"speedup_vs_plain_best": 1.0}
    report["model_targets"] = {"cnn": {"speedup_vs_plain_best": 1.3}}
    m = report["models"]["cnn"]
    assert m["speedup_vs_plain_fp32"] == pytest.approx(2.5)
    assert m["speedup_vs_plain_best"] == pytest.approx(1.25)
    assert m["train_loss_change_vs_plain_best"] == pytest.approx(0.05)
    assert "accuracy_delta_vs_plain_best" not in m
    assert [r[-1] for r in rows(report)] == ["1.00x", "2.00x", "2.50x"]
    md = markdown(report)
    assert "| cnn | cpuft | fp32 | system, 2 threads, unpinned | 25.0 | 25 | 1500 | - | " \
        "2.1000 (train) | 2.50x |" in md
    assert "speedup vs plain best = 1.25x (target 1.3x: NOT met)" in md
    bar_chart(report, tmp_path / "b.png")
    assert (tmp_path / "b.png").stat().st_size > 5000


def test_compile_measurement_separates_start_up_from_pace(tmp_path, monkeypatch):
    from cpuft.bench.runner import compile_measurement
    from cpuft.speedplan import compile_cache

    eager = {"step_seconds": [0.5, 0.2, 0.2, 0.2]}
    compiled = {"step_seconds": [30.0, 0.1, 0.1, 0.1]}
    m = compile_measurement(eager, compiled, batch_size=10)
    assert m.speedup == pytest.approx(2.0)
    assert m.compile_seconds == pytest.approx(29.9)
    monkeypatch.setenv("CPUFT_CACHE", str(tmp_path))
    k = compile_cache.key(cpu="X", model="", precision="bf16", max_seq_length=128,
                          torch_version="2.13.0")
    assert "|minilm|" in k
    assert compile_cache.lookup(k) is None
    compile_cache.store(k, m)
    assert compile_cache.lookup(k) == m


def test_rounds_pair_their_runs_and_take_the_median_ratio():
    from cpuft.bench.compare import median_run

    # The machine slowed down in round 2: paired ratios stay 2.0, 1.5, 2.0.
    ours = median_run([result("cpuft", 200.0, 0.8), result("cpuft", 60.0, 0.8),
                       result("cpuft", 220.0, 0.8)], "tokens_per_second")
    theirs = median_run([result("trainer-best", 100.0, 0.8), result("trainer-best", 40.0, 0.8),
                         result("trainer-best", 110.0, 0.8)], "tokens_per_second")
    assert ours["samples_per_second"] == 200.0 and theirs["samples_per_second"] == 100.0
    report = compare([theirs, ours], MATMUL)
    m = report["models"]["minilm"]
    assert m["speedup_vs_trainer_best"] == pytest.approx(2.0)
    assert m["configs"]["cpuft"]["rounds_samples_per_second"] == [200.0, 60.0, 220.0]
    assert m["configs"]["cpuft"]["rounds_tokens_per_second"] == [6000.0, 1800.0, 6600.0]


def test_scaling_read_against_the_faster_one_node_baseline():
    from cpuft.bench.scaling import best_one_node

    # halves slower than whole batches: the whole-batch 1-node run is the best baseline
    assert best_one_node(50.0, 0.95) == pytest.approx(50.0)
    # halves 15% faster: the baseline is 1 node accumulating halves, so 95.4% measured against
    # whole batches is 82.7% against it
    assert best_one_node(50.0, 1.154) == pytest.approx(50.0 * 1.154)


def test_scaling_chart(tmp_path):
    from cpuft.bench.report import scaling_chart

    def run(nodes, speed, comm):
        return {"nodes": nodes, "samples_per_second": speed, "comm_fraction": comm}

    report = {"configs": {"1-node": run(1, 50.3, 0.0), "2-nodes": run(2, 77.0, 0.078),
                          "2-nodes-bf16": run(2, 79.0, 0.071)},
              "machine_ceiling": 0.951, "best_one_node_samples_per_second": 50.3,
              "target_efficiency": 0.95, "global_batch": 32,
              "rate": "10gbit"}
    scaling_chart(report, tmp_path / "scaling.png")
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scaling_rounds_take_the_median_of_each_rounds_own_ratio():
    from cpuft.bench.scaling import ScalingOptions, summarise

    def run(speed, comm=0.05):
        return {"samples_per_second": speed, "comm_fraction": comm}

    # The machine drifts: round 2 is fast for the 1-node run only. Medians of the speeds
    # (50 and 84) would say 84%; the rounds' own ratios are 105%, 75% and 70%.
    per_round = {"1-node": [run(40.0), run(60.0), run(50.0)],
                 "2-nodes": [run(84.0), run(90.0), run(70.0, comm=0.2)],
                 "2-nodes-bf16": [run(80.0), run(96.0), run(60.0)]}
    halves = {"ceiling": 0.96, "whole_seconds": 9.6, "halves_seconds": 10.0}
    report = summarise(per_round, halves, ScalingOptions(rounds=3, compressions=("none", "bf16")))
    assert report["rounds_scaling_efficiency"] == pytest.approx([1.05, 0.75, 0.70])
    assert report["scaling_efficiency"] == pytest.approx(0.75)
    assert report["scaling_efficiency_bf16"] == pytest.approx(0.8)  # 1.0, 0.8, 0.6
    assert report["communication_efficiency"] == pytest.approx(0.75 / 0.96)
    assert report["configs"]["2-nodes"]["samples_per_second"] == 84.0  # its median round
    assert report["configs"]["2-nodes"]["rounds_samples_per_second"] == [84.0, 90.0, 70.0]
    assert report["target_met"] is False
    assert "no_communication_efficiency" not in report  # no nosync run


def test_a_run_that_sends_nothing_splits_the_efficiency_at_communication():
    from cpuft.bench.scaling import ScalingOptions, summarise

    def run(speed):
        return {"samples_per_second": speed, "comm_fraction": 0.0}

    per_round = {"1-node": [run(50.0), run(40.0)],
                 "2-nodes": [run(80.0), run(68.0)],  # 80%, 85%
                 "2-nodes-nosync": [run(90.0), run(76.0)]}  # 90%, 95%
    halves = {"ceiling": 1.0, "whole_seconds": 10.0, "halves_seconds": 10.0}
    report = summarise(per_round, halves,
                       ScalingOptions(rounds=2, compressions=("none", "nosync")))
    assert report["scaling_efficiency"] == pytest.approx(0.825)
    assert report["no_communication_efficiency"] == pytest.approx(0.925)
    assert report["scaling_efficiency_nosync"] == pytest.approx(0.925)
    assert report["communication_keeps"] == pytest.approx(0.825 / 0.925)


def test_runs_that_lost_cpu_to_other_guests_are_flagged():
    from cpuft.bench.compare import median_run

    calm = median_run([{**result("trainer-best", 100.0, 0.8), "steal_fraction": 0.01}] * 3)
    rounds = [{**result("cpuft", s, 0.8), "steal_fraction": f}
              for s, f in ((150.0, 0.0), (90.0, 0.29), (160.0, 0.02))]
    report = compare([calm, median_run(rounds)], MATMUL)
    report["targets"] = {}
    cpuft = report["models"]["minilm"]["configs"]["cpuft"]
    assert cpuft["rounds_steal_fraction"] == [0.0, 0.29, 0.02]
    md = markdown(report)
    assert "minilm: cpuft lost 29% of the CPU time to other guests of this VM (steal) in round 2 " \
        "of 3" in md
    assert "trainer-best lost" not in md


def test_steal_and_other_processes_read_from_proc_stat_text():
    from cpuft.bench.steal import Reading, cpu_ticks, others_fraction, steal_fraction

    stat = "cpu  600 0 50 400 2 0 1 40 0 0\ncpu0 300 0 25 200 1 0 1 20 0 0\n"
    assert cpu_ticks(stat) == (40, 651, 1093)
    before = Reading(*cpu_ticks(stat), own_seconds=1.0)
    after = Reading(*cpu_ticks("cpu  700 0 60 420 2 0 1 70 0 0\n"), own_seconds=1.5)
    assert steal_fraction(before, after) == pytest.approx(30 / 160)
    # 110 busy ticks (1.1 s at 100 a second), 0.5 s of them this process's own, of 1.6 s
    assert others_fraction(before, after, hz=100) == pytest.approx(0.6 / 1.6)
    assert steal_fraction(None, after) == 0.0 and others_fraction(before, None) == 0.0
    assert cpu_ticks("cpu 5 0 5 90\n") == (0, 10, 100)  # an old kernel without a steal field
    with pytest.raises(ValueError, match="no 'cpu' line"):
        cpu_ticks("intr 1 2 3\n")


def test_ratios_of_a_round_on_a_busy_machine_are_marked():
    from cpuft.bench.compare import median_run

    calm = median_run([{**result("trainer-best", 100.0, 0.8), "others_fraction": 0.01}] * 3)
    rounds = [{**result("cpuft", s, 0.8), "others_fraction": f}
              for s, f in ((150.0, 0.0), (190.0, 0.35), (160.0, 0.02))]
    report = compare([calm, median_run(rounds)], MATMUL)
    report["targets"] = {"speedup_vs_trainer_best": 1.5}
    assert report["models"]["minilm"]["busy_rounds"] == [1]
    assert "speedup vs trainer best = 1.60x (target 1.5x: met) - measured on a busy machine " \
        "(round 2 of 3: other processes took 10% or more of the CPU time)" in markdown(report)
    quiet = compare([calm, median_run([{**r, "others_fraction": 0.0} for r in rounds])], MATMUL)
    quiet["targets"] = report["targets"]
    assert "busy" not in markdown(quiet)


def test_every_configuration_shows_how_its_process_ran():
    from cpuft.bench.report import process

    assert process({"allocator": "tcmalloc", "threads": 4, "cpus": [0, 1, 2, 3, 8],
                    "pinned": True}) == "tcmalloc, 4 threads, pinned to 0-3,8"
    assert process({"allocator": "system", "threads": 2, "cpus": [0, 1],
                    "pinned": False}) == "system, 2 threads, unpinned on 0-1"


def test_rounds_rotate_the_order_of_each_models_configurations():
    from cpuft.bench.runner import turn_order

    runs = plan_runs(BenchOptions(models=["minilm", "bert-base"], quick=True))
    names = [(r.model, r.config) for r in runs]
    firsts = set()
    for round_ in range(3):
        order = [names[i] for i in turn_order(runs, round_)]
        assert sorted(order) == sorted(names)
        assert [m for m, _ in order] == ["minilm"] * 3 + ["bert-base"] * 3
        firsts.add(order[0][1])
    assert firsts == {"stock-2021", "trainer-best", "cpuft"}


def test_accuracy_is_compared_as_the_mean_over_seeded_rounds():
    from cpuft.bench.compare import median_run

    def seeded(config, accuracies):
        return median_run([{**result(config, 100.0 + i, a), "seed": 42 + i}
                           for i, a in enumerate(accuracies)], "tokens_per_second")

    report = compare([seeded("trainer-best", [0.83, 0.82, 0.84]),
                      seeded("cpuft", [0.84, 0.81, 0.82])], MATMUL)
    report["targets"] = {}
    entry = report["models"]["minilm"]
    assert entry["configs"]["cpuft"]["rounds_seed"] == [42, 43, 44]
    assert entry["accuracy_delta_vs_trainer_best"] == pytest.approx(-0.0067, abs=1e-4)
    md = markdown(report)
    assert "cpuft accuracy -0.67 points against trainer-best's (means over seeds) (target at " \
        "least -0.2: NOT met)" in md
    assert "0.8233 (mean of 3 seeds)" in md
    same_seed = [median_run([{**result(config, 100.0, 0.8), "seed": 42}] * 2)
                 for config in ("trainer-best", "cpuft")]
    assert "mean_accuracy" not in compare(same_seed, MATMUL)["models"]["minilm"]["configs"][
        "cpuft"]


def test_a_single_run_that_lost_cpu_is_flagged_with_advice():
    report = compare([{**result("cpuft", 90.0, 0.8), "steal_fraction": 0.12}], MATMUL)
    report["targets"] = {}
    assert "cpuft lost 12% of the CPU time to other guests of this VM (steal), so that run's " \
        "speed reads low: rerun, or use --rounds" in markdown(report)


def test_peak_is_the_faster_matmul_measurement_per_format():
    from cpuft.bench.compare import faster_matmul

    before = {"bf16_gflops": 152.0, "fp32_gflops": 175.0, "seconds": 3.0}
    after = {"bf16_gflops": 140.0, "fp32_gflops": 260.0}
    assert faster_matmul(before, after) == {"bf16_gflops": 152.0, "fp32_gflops": 260.0}


@pytest.mark.parametrize("damaged", ["[]", "{", '{"k": {"unknown": 1}}', '{"k": [1, 2]}'])
def test_a_damaged_compile_cache_reads_as_empty_and_is_rewritten(tmp_path, damaged):
    from cpuft.speedplan import compile_cache

    path = tmp_path / "compile.json"
    path.write_text(damaged)
    assert compile_cache.lookup("k", path) is None
    m = compile_cache.CompileMeasurement(eager_seconds_per_sample=2.0,
                                         compiled_seconds_per_sample=1.0, compile_seconds=30.0)
    compile_cache.store("k", m, path)
    assert compile_cache.lookup("k", path) == m


def test_the_chart_says_each_speed_up_with_its_spread_over_rounds(tmp_path):
    from cpuft.bench.report import speedup_lines

    report = compare([result("trainer-best", 100.0, 0.81), result("cpuft", 160.0, 0.81)],
                     MATMUL)
    entry = report["models"]["minilm"]
    assert speedup_lines(entry) == ["cpuft 1.60x trainer-best"]
    entry["configs"]["cpuft"]["rounds_tokens_per_second"] = [4500.0, 4800.0, 5400.0]
    entry["configs"]["trainer-best"]["rounds_tokens_per_second"] = [3000.0, 3000.0, 3000.0]
    assert speedup_lines(entry) == ["cpuft 1.60x trainer-best (1.50-1.80)"]
    bar_chart(report, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_above_the_measured_peak_is_said_in_words_and_the_peak_stays():
    """A square matmul timed in a slow moment (200 GFLOP/s), a run executing 240: the peak is
    not raised to the run's rate; the report says the probe read low."""
    from cpuft.bench.compare import measured_peaks
    from cpuft.bench.report import utilisation_line
    from cpuft.bench.utilisation import Peak

    cpuft = {**result("cpuft", 200.0, 0.8, "fp32"), "executed_flops_per_sample": 1.2e9,
             "peak_gflops_model_shapes": 180.0, "weight_uses": 1.0e8,
             "attention_coefficient": 0.0, "tokens_per_sample": 2.5}
    stock = {**cpuft, "config": "trainer-best", "samples_per_second": 100.0,
             "executed_flops_per_sample": 1.5e9, "peak_gflops_model_shapes": 190.0}
    assert measured_peaks([cpuft, stock], MATMUL) == {"bf16": 1000.0, "fp32": 200.0}
    theory = {"fp32": Peak(400.0, "2 cores x 3.12 GHz x 64")}
    report = compare([stock, cpuft], MATMUL, theory)
    report["targets"] = {}
    entry = report["models"]["minilm"]
    assert entry["above_measured_peak"] and entry["hfu"] == pytest.approx(1.2)
    assert entry["hfu_theoretical"] == pytest.approx(0.6)
    assert entry["skipped_flops_fraction"] == pytest.approx(0.2)
    assert utilisation_line(entry) == (
        "cpuft executes 240 GFLOP/s, above the measured peak: the matmul probe read low (a slow "
        "moment of the machine?), so no utilisation against it is given, 60.0% of the "
        "theoretical; cpuft skips 20% of them")
    assert "theoretical fp32 peak 400 GFLOP/s: 2 cores x 3.12 GHz x 64" in markdown(report)
    assert "above the clock read" not in markdown(report)
    report["theoretical_peak_gflops"]["fp32"] = 160.0
    assert "the measured fp32 peak is 1.25x the theoretical one: the cores run above the " \
        "clock read" in markdown(report)
    cpuft["samples_per_second"] = 100.0
    line = utilisation_line(compare([stock, cpuft], MATMUL, theory)["models"]["minilm"])
    assert line == ("cpuft runs at 60.0% of the measured peak (executed FLOPs), 30.0% of the "
                    "theoretical; nominal model FLOPs 75.0% (37.5% of the theoretical); cpuft "
                    "skips 20% of them")


def test_every_configuration_gets_the_stock_models_nominal_count():
    """cpuft's first-token layer leaves modules unused: counted on its model, its nominal FLOPs
    would be lower than the same work's on trainer-best's."""
    stock = {**result("trainer-best", 100.0, 0.8), "weight_uses": 2.0e7,
             "attention_coefficient": 1.0e5, "tokens_per_sample": 30.0}
    ours = {**stock, "config": "cpuft", "weight_uses": 1.9e7}
    report = compare([stock, ours], MATMUL)
    configs = report["models"]["minilm"]["configs"]
    expected = 6 * 2.0e7 * 30 + 1.0e5 * 30**2
    assert configs["cpuft"]["flops_per_sample"] == pytest.approx(expected)
    assert configs["trainer-best"]["flops_per_sample"] == pytest.approx(expected)


def test_the_theoretical_peak_follows_the_isa_and_the_clock():
    from cpuft.bench.utilisation import clock_ghz, theoretical_peaks

    assert clock_ghz("model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n") == (
        2.9, "the model name's rated clock")
    assert clock_ghz("cpu MHz\t\t: 2600.000\ncpu MHz\t\t: 2400.000\n") == (
        2.6, "cpu MHz in /proc/cpuinfo")
    assert clock_ghz("anything", "3800000\n") == (3.8, "cpufreq's cpuinfo_max_freq")
    assert clock_ghz("nothing") == (0.0, "")
    amx = theoretical_peaks("amx", "Intel(R) Xeon(R) Platinum 8480+", 2, 2.0, "x")
    assert amx["bf16"].gflops == 4096 and amx["fp32"].gflops == 256
    assert "1024 bf16 FLOPs a cycle (AMX tiles)" in amx["bf16"].basis
    zen4 = theoretical_peaks("avx512_bf16", "AMD EPYC 9654 96-Core Processor", 4, 2.0, "x")
    assert zen4["fp32"].gflops == 256 and zen4["bf16"].gflops == 512
    avx2 = theoretical_peaks("avx2", "Intel(R) Xeon(R) CPU E5-2686 v4", 1, 2.0, "x")
    assert avx2["bf16"].gflops == avx2["fp32"].gflops == 64
    assert theoretical_peaks("amx", "x", 2, 0.0, "") == {}


def test_flops_are_counted_as_the_step_runs_them_and_the_peak_at_the_models_shapes():
    import torch
    from torch import nn

    from cpuft.bench.flops import (
        executed_flops,
        matmul_peak_gflops,
        model_shapes,
        nominal_terms,
    )
    from cpuft.bench.utilisation import nominal_flops

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    # forward 2*5*(8*16 + 16*4); backward twice that, less the input gradient of the first
    flops = executed_flops(lambda: model(x).sum().backward())
    assert flops == 2 * 5 * (8 * 16 + 16 * 4) * 3 - 2 * 5 * 8 * 16
    assert model_shapes(model, 40) == [(40, 8, 16), (40, 16, 4)]
    assert matmul_peak_gflops([(64, 64, 64)], torch.float32, repeats=2, seconds=0.02) > 0

    class Config:
        num_hidden_layers, hidden_size = 2, 16

    model.config = Config()
    params = 8 * 16 + 16 + 16 * 4 + 4
    assert nominal_flops(**nominal_terms(model), tokens=10.0) == 6 * params * 10 + 12 * 2 * 16 * 100


@pytest.mark.parametrize("groups", [1, 4])
def test_a_grouped_convolutions_gradients_count_as_many_products_as_its_forward(groups):
    # torch's counter takes the weight gradient of a grouped convolution as ungrouped
    import torch
    from torch import nn

    from cpuft.bench.flops import executed_flops

    conv = nn.Conv1d(16, 32, 1, groups=groups)
    x = torch.randn(3, 16, 5, requires_grad=True)
    forward = 2 * 3 * 5 * 16 * 32 // groups
    assert executed_flops(lambda: conv(x).sum().backward()) == 3 * forward
    frozen_input = torch.randn(3, 16, 5)  # no input gradient asked for: the weight's alone
    assert executed_flops(lambda: conv(frozen_input).sum().backward()) == 2 * forward


def test_many_models_wrap_onto_rows(tmp_path):
    import matplotlib.image

    models = [f"/data/models/family{i}" for i in range(5)]
    report = compare([{**result(config, sps, 0.8), "model": model}
                      for model in models for config, sps in (("trainer-best", 100.0),
                                                              ("cpuft", 160.0))], MATMUL)
    bar_chart(report, tmp_path / "bench.png")
    height, width, _ = matplotlib.image.imread(tmp_path / "bench.png").shape
    assert (height, width) == (2 * 4 * 110, 4 * 5 * 110)  # 4 panels a row, then a second row


def test_a_shared_layer_counts_once_for_each_position_in_the_stack():
    import torch
    from transformers import AlbertConfig, AlbertForSequenceClassification

    from cpuft.bench.flops import weight_uses

    torch.manual_seed(0)
    model = AlbertForSequenceClassification(AlbertConfig(
        vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=3,
        num_attention_heads=2, intermediate_size=64))
    shared = sum(p.numel() for p in model.albert.encoder.albert_layer_groups.parameters())
    others = sum(p.numel() for n, p in model.named_parameters()
                 if "embeddings" not in n and "albert_layer_groups" not in n)
    model.train()
    assert weight_uses(model) == 3 * shared + others
    assert model.training  # the counting pass left the mode as it was


def test_ablation_runs_cpuft_with_each_setting_changed_and_reports_what_each_gives():
    from cpuft.bench.report import gains_line
    from cpuft.bench.spec import VARIANTS
    from cpuft.bench.worker import run_config

    runs = plan_runs(BenchOptions(models=["minilm", "smollm2-lora", "cnn"], quick=True,
                                  ablate=True, configs=["trainer-best", "cpuft"]))
    assert [r.config for r in runs if r.model == "minilm"] == [
        "trainer-best", "cpuft", *VARIANTS]
    assert [r.config for r in runs if r.model == "smollm2-lora"] == ["trainer-best", "cpuft"]
    assert [r.config for r in runs if r.model == "cnn"] == ["cpuft"]
    spec = next(r for r in runs if r.config == "cpuft-no-fast-dropout")
    assert run_config(spec).speedups.fast_dropout is False
    assert run_config(next(r for r in runs if r.config == "cpuft")).speedups.fast_dropout
    report = compare([result("cpuft", 100.0, 0.82), result("cpuft-no-fast-dropout", 80.0, 0.82),
                      result("cpuft-sparse-embeddings", 110.0, 0.815)], MATMUL)
    entry = report["models"]["minilm"]
    assert entry["gain_over_variant"] == pytest.approx(
        {"cpuft-no-fast-dropout": 1.25, "cpuft-sparse-embeddings": 100 / 110})
    assert gains_line(entry) == (
        "cpuft's speed over cpuft with one setting changed (above 1x: what it gives): no fast "
        "dropout 1.25x, sparse embeddings 0.91x (accuracy -0.50 points)")


def test_each_configuration_starts_with_its_allocator():
    from cpuft.bench.placement import worker_env

    ours = {"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"}
    for config in ("trainer-best", "trainer-compile", "plain-best", "cpuft"):
        assert worker_env(config, ours) == (ours, ())
    for config in ("stock-2021", "plain-fp32", "cpuft-no-allocator"):
        assert worker_env(config, ours) == ({}, ("LD_PRELOAD", "MALLOC_CONF"))


def test_each_configuration_is_pinned_unless_started_plain_or_asked_not_to():
    from cpuft.bench.placement import pinned

    assert all(pinned(c) for c in ("trainer-best", "plain-best", "cpuft", "cpuft-no-allocator"))
    assert not any(pinned(c) for c in ("stock-2021", "plain-fp32", "cpuft-no-pinning"))


def test_a_decoders_eval_loss_is_compared_as_the_mean_over_seeds():
    from cpuft.bench.compare import median_run

    def seeded(config, losses):
        return median_run([{**result(config, 10.0 + i, 0.8), "model": "smollm2-lora",
                            "eval_loss": loss, "seed": 42 + i, "train_peak_memory_mb": 900.0}
                           for i, loss in enumerate(losses)], "tokens_per_second")

    report = compare([seeded("trainer-best", [0.245, 0.259, 0.281]),
                      seeded("cpuft", [0.231, 0.273, 0.285])], MATMUL)
    report["targets"], report["eval_loss_tolerance"] = {}, 0.01
    entry = report["models"]["smollm2-lora"]
    assert entry["eval_loss_change_vs_trainer_best"] == pytest.approx(0.789 / 0.785 - 1)
    assert "cpuft eval loss +0.51% against trainer-best's after the same steps (means over " \
        "seeds) (target within 1%: met)" in markdown(report)
