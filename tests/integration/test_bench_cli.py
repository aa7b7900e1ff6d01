"""`cpuft bench` for real on a tiny model: three fresh worker processes, table, chart, JSON."""

import json
import subprocess
import sys

import pytest

from tests.helpers import cpuft_env


def table_row(out, config):
    return next(line for line in (out / "bench.md").read_text().splitlines()
                if f"| {config} |" in line)


@pytest.mark.slow
def test_bench_runs_three_ways_and_ends_with_json(tiny_model, tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "bench", "--models", str(tiny_model), "--steps", "3",
         "--batch-size", "4", "--max-seq-length", "32", "--output-dir", str(out)],
        capture_output=True, text=True, env=cpuft_env(), timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    entry = report["models"][str(tiny_model)]
    assert set(entry["configs"]) == {"stock-2021", "trainer-best", "cpuft"}
    for c in entry["configs"].values():
        assert c["samples_per_second"] > 0 and 0 <= c["accuracy"] <= 1
        assert 1 < c["tokens_per_sample"] <= 32
        assert c["tokens_per_second"] == pytest.approx(
            c["samples_per_second"] * c["tokens_per_sample"])
    configs = entry["configs"]
    assert configs["stock-2021"]["precision"] == "fp32"
    # trainer-best trains on cpuft's batches: the same samples, so the same tokens.
    assert entry["configs"]["trainer-best"]["tokens_per_sample"] == pytest.approx(
        entry["configs"]["cpuft"]["tokens_per_sample"])
    # trainer-best starts as torch's CPU launcher would: cpuft's allocator, threads and cores.
    best, ours, plain = configs["trainer-best"], configs["cpuft"], configs["stock-2021"]
    for key in ("allocator", "threads", "cpus", "pinned"):
        assert best[key] == ours[key], key
    assert ours["pinned"] and ours["allocator"] in ("tcmalloc", "jemalloc")
    assert plain["allocator"] == "system" and not plain["pinned"]
    assert "unpinned" in table_row(out, "stock-2021")
    assert "pinned to" in table_row(out, "trainer-best")
    for other, key in (("stock-2021", "speedup_vs_stock_2021"),
                       ("trainer-best", "speedup_vs_trainer_best")):
        # a ratio of real tokens per second, cpuft's over the other's
        assert entry[key] == pytest.approx(
            configs["cpuft"]["tokens_per_second"] / configs[other]["tokens_per_second"])
    assert entry["mfu"] > 0 and entry["hfu"] > 0 and entry["skipped_flops_fraction"] < 1
    for c in configs.values():  # one nominal count, the stock model's
        assert c["weight_uses"] > 0 and c["peak_gflops_model_shapes"] > 0
    assert ours["flops_per_sample"] == pytest.approx(best["flops_per_sample"])
    theory = report["theoretical_peak_gflops"]
    assert 0 < report["peak_gflops"]["fp32"] <= 1.5 * theory["fp32"]  # a clock may boost
    for c in configs.values():  # the theoretical peak holds every run
        assert 0 < c["hfu_theoretical"] < 1
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert "| configuration |" in (out / "bench.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--max-seq-length", "1"], "--max-seq-length must be at least 2"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--models", "minilm,nosuch"],
     "'nosuch' is neither minilm, bert-base, smollm2-lora, smollm2-full, cnn, rnn nor a model "
     "folder"),
    (["--models", "cnn", "--configs", "trainer-best"],
     "--configs: cnn runs none of trainer-best; its configurations are plain-fp32, plain-best, "
     "cpuft"),
    (["--models", "rnn", "--scaling"], "--scaling measures classifiers: rnn is a loop model"),
    (["--scaling", "--rate", "fast"], "--rate 'fast': give a tc rate"),
    (["--scaling", "--global-batch", "0"], "--global-batch must be even and at least 2"),
    (["--scaling", "--global-batch", "8", "--grad-accum", "3"],
     "--grad-accum 3: --global-batch 8 must split into that many micro-batches"),
    (["--output-dir", "{file}/b"], "is a file, not a folder"),
    (["--output-dir", "/proc/cpuft-bench"], "cannot write in /proc"),
    (["--models", "{tiny}", "--max-seq-length", "128"],
     "--max-seq-length 128 is longer than {tiny} takes (64 tokens)"),
])
def test_bad_bench_flags_stop_before_any_run(capsys, tmp_path, tiny_model, argv, message):
    from cpuft.cli.main import main

    (tmp_path / "f").write_text("")
    argv = [a.replace("{file}", str(tmp_path / "f")).replace("{tiny}", str(tiny_model))
            for a in argv]
    message = message.replace("{tiny}", str(tiny_model))
    code = main(["bench", "--output-dir", str(tmp_path / "b"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "b").exists()


def test_a_report_that_cannot_be_saved_is_still_printed(capsys, tmp_path):
    from cpuft.cli.bench_cmd import finish, save_outputs

    (tmp_path / "f").write_text("")
    saved = save_outputs(tmp_path / "f" / "out", {"bench.md": lambda p: p.write_text("x")})
    assert isinstance(saved, str) and "could not write the report" in saved
    assert finish({"speedup": 1.5}, saved) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == '{"speedup": 1.5}'
    assert captured.err.startswith("cpuft: could not write the report")
    saved = save_outputs(tmp_path / "ok", {"bench.md": lambda p: p.write_text("x")})
    assert saved == [tmp_path / "ok" / "bench.md"] and finish({}, saved) == 0


@pytest.mark.slow
def test_bench_of_a_decoder_runs_trainer_with_peft_against_cpuft(tmp_path):
    from tests.helpers import make_tiny_llama

    llama = make_tiny_llama(tmp_path / "llama")
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "bench", "--models", f"lora:{llama},full:{llama}",
         "--steps", "4", "--batch-size", "4", "--output-dir", str(out)],
        capture_output=True, text=True, env=cpuft_env(), timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in (f"lora:{llama}", f"full:{llama}"):
        entry = report["models"][name]
        configs = entry["configs"]
        assert set(configs) == {"trainer-best", "cpuft"}  # 2021 had no LoRA
        # The same batches: the same real tokens in the measured steps.
        assert configs["trainer-best"]["tokens_per_sample"] == pytest.approx(
            configs["cpuft"]["tokens_per_sample"])
        assert entry["speedup_vs_trainer_best"] == pytest.approx(
            configs["cpuft"]["tokens_per_second"] / configs["trainer-best"]["tokens_per_second"])
        for c in configs.values():
            assert c["eval_loss"] > 0 and c["peak_memory_mb"] >= c["train_peak_memory_mb"] > 0
            assert 0 <= c["accuracy"] <= 1 and 0 < c["hfu"] <= 1
        # The same training: only dropout masks and float rounding differ.
        assert abs(entry["eval_loss_change_vs_trainer_best"]) < 0.05
        assert entry["eval_loss_change_vs_trainer_best"] == pytest.approx(
            configs["cpuft"]["eval_loss"] / configs["trainer-best"]["eval_loss"] - 1)
        profile = entry["profile"]
        assert profile["steps"] == 2 and profile["share"]["matmul"] > 0
        assert sum(profile["share"].values()) == pytest.approx(1.0, abs=0.02)
    markdown = (out / "bench.md").read_text()
    assert "eval loss" in markdown and "against trainer-best's after the same steps" in markdown


@pytest.mark.slow
def test_bench_of_the_loop_models_runs_them_three_ways(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "bench", "--models", "cnn,rnn", "--quick", "--steps", "4",
         "--batch-size", "4", "--output-dir", str(out)],
        capture_output=True, text=True, env=cpuft_env(), timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("cnn", "rnn"):
        entry = report["models"][name]
        configs = entry["configs"]
        assert list(configs) == ["plain-fp32", "plain-best", "cpuft"]
        # The same batches: the same images or real tokens in the measured steps.
        assert len({c["tokens_per_sample"] for c in configs.values()}) == 1
        for other in ("plain_fp32", "plain_best"):
            assert entry[f"speedup_vs_{other}"] == pytest.approx(
                configs["cpuft"]["samples_per_second"]
                / configs[other.replace("_", "-")]["samples_per_second"])
        assert configs["cpuft"]["plan"]["fast_dropout"] is True
        assert "channels_last_reason" in configs["cpuft"]["plan"]
        for c in configs.values():
            assert c["train_loss"] > 0 and 0 < c["hfu"] <= 1
        profile = entry["profile"]
        assert profile["steps"] == 2
        assert profile["share"]["convolution" if name == "cnn" else "matmul"] > 0.1
    assert report["models"]["cnn"]["configs"]["cpuft"]["tokens_per_sample"] == 1.0
    markdown = (out / "bench.md").read_text()
    assert "| cnn | plain-best |" in markdown and "(train)" in markdown
    assert "cnn: cpuft speedup vs plain best" in markdown
