"""Two ranks on gloo train exactly what one process trains on the same global batch."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import (
    TOLERANCE,
    ZERO_GRADIENT,
    cpuft_env,
    free_port,
    make_tiny_model,
    sentiment_rows,
    write_csv,
)


def train(argv, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "cpuft", "train", *argv], capture_output=True,
                          text=True, env=cpuft_env(), timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.multiprocess
@pytest.mark.parametrize("embeddings", ["--sparse-embeddings", "--embedding-rows",
                                        "--no-embedding-rows"])
def test_two_ranks_equal_one_process_on_the_global_batch(tmp_path, embeddings):
    # No dropout (its masks would differ), and weights large enough that no gradient is so close
    # to 0 that AdamW turns rounding noise into a full step.
    model = make_tiny_model(tmp_path / "model", dropout=0.0, init_range=0.5)
    data = write_csv(tmp_path / "d.csv", sentiment_rows(80, seed=3))
    common = ["--model", str(model), "--train-file", str(data), "--text-columns", "text",
              "--max-steps", "6", "--lr", "1e-4", "--precision", "fp32", "--no-progress",
              "--log-steps", "1", embeddings]
    train([*common, "--batch-size", "8", "--output-dir", str(tmp_path / "one")])
    proc = train([*common, "--batch-size", "4", "--nproc-per-node", "2",
                  "--master-port", str(free_port()), "--output-dir", str(tmp_path / "two")])
    assert "[" in proc.stdout and ":0] trained 6 steps" in proc.stdout
    one = load_file(tmp_path / "one" / "model.safetensors")
    two = load_file(tmp_path / "two" / "model.safetensors")
    assert one.keys() == two.keys()
    worst = max(float((one[k] - two[k]).abs().max()) for k in one if ZERO_GRADIENT not in k)
    assert worst <= TOLERANCE, f"parameters differ by {worst}"
    initial = load_file(model / "model.safetensors")
    moved = max(float((one[k] - initial[k]).abs().max()) for k in one if k in initial)
    assert moved > 100 * TOLERANCE  # the runs trained: agreement is not just both standing still
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert (summary["world_size"], summary["nodes"], summary["backend"]) == (2, 1, "gloo")
    assert 0 <= summary["step_time_split"]["comm_wait_fraction"] < 1
    assert summary["train_samples"] == 72 and summary["steps"] == 6
    assert summary["speedups"]["sparse_embeddings"] is (embeddings == "--sparse-embeddings")
    assert summary["speedups"]["embedding_rows"] is (embeddings == "--embedding-rows")
    assert summary["bucket_cap_mb"] == 25.0  # DDP's default, for fp32 gradients


@pytest.mark.multiprocess
def test_powersgd_sends_low_rank_gradients_after_its_warm_up(tmp_path):
    from cpuft.distributed.powersgd import PowerSGD

    start = PowerSGD().start_step

    model = make_tiny_model(tmp_path / "model", dropout=0.0, init_range=0.5)
    data = write_csv(tmp_path / "d.csv", sentiment_rows(80, seed=3))
    common = ["--model", str(model), "--train-file", str(data), "--text-columns", "text",
              "--lr", "1e-4", "--precision", "fp32", "--no-progress", "--batch-size", "4",
              "--nproc-per-node", "2"]
    runs = {}
    for compression, steps in (("none", start), ("powersgd", start),
                               ("none", start + 4),
                               ("powersgd", start + 4)):
        out = tmp_path / f"{compression}-{steps}"
        train([*common, "--max-steps", str(steps), "--grad-compression", compression,
               "--master-port", str(free_port()), "--output-dir", str(out)])
        runs[compression, steps] = load_file(out / "model.safetensors")
        summary = json.loads((out / "summary.json").read_text())
        assert summary["grad_compression"] == compression
    def gap(a, b):
        return max(float((a[k] - b[k]).abs().max()) for k in a if ZERO_GRADIENT not in k)
    # Plain all-reduce until its start step, low-rank factors after it.
    assert gap(runs["none", start], runs["powersgd", start]) <= \
        TOLERANCE
    assert gap(runs["none", start + 4],
               runs["powersgd", start + 4]) > 10 * TOLERANCE


@pytest.mark.multiprocess
def test_two_ranks_in_bf16_weights_train_what_one_process_trains(tmp_path):
    # bf16 weights, bf16 gradients summed over ranks in bf16: the runs agree to bf16 rounding,
    # not to fp32's last bits. Rank 0's masters are broadcast, so no rank drifts from another.
    model = make_tiny_model(tmp_path / "model", dropout=0.0, init_range=0.5)
    data = write_csv(tmp_path / "d.csv", sentiment_rows(80, seed=3))
    common = ["--model", str(model), "--train-file", str(data), "--text-columns", "text",
              "--max-steps", "6", "--lr", "1e-3", "--precision", "bf16", "--bf16-weights",
              "--no-progress", "--log-steps", "1"]
    train([*common, "--batch-size", "8", "--output-dir", str(tmp_path / "one")])
    train([*common, "--batch-size", "4", "--nproc-per-node", "2",
           "--master-port", str(free_port()), "--output-dir", str(tmp_path / "two")])
    one = load_file(tmp_path / "one" / "model.safetensors")
    two = load_file(tmp_path / "two" / "model.safetensors")
    initial = load_file(model / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in two.values())  # the masters, saved fp32
    keys = [k for k in one if k in initial and ZERO_GRADIENT not in k]

    def mean_gap(a, b):
        return float(torch.cat([(a[k] - b[k]).abs().flatten() for k in keys]).mean())

    moved = mean_gap(one, initial)
    # Seen: they moved 1.6e-3 on average and ended 3e-5 apart (2%); a rank training on its
    # own half, or gradients not averaged, ends as far apart as the runs moved.
    assert moved > 1e-4
    assert mean_gap(one, two) < 0.1 * moved
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["speedups"]["bf16_weights"] is True and summary["world_size"] == 2
    assert summary["grad_sync"] is True
    # bf16 gradients (but the fp32 position embeddings'): buckets of about half the bytes
    assert 12.5 <= summary["bucket_cap_mb"] < 20

    # --no-grad-sync (what `cpuft bench --scaling` runs as 'nosync'): nothing is averaged, so
    # rank 0 trains on its half alone and ends as far from the 1-process run as a half would.
    proc = train([*common, "--batch-size", "4", "--nproc-per-node", "2", "--no-grad-sync",
                  "--master-port", str(free_port()), "--output-dir", str(tmp_path / "apart")])
    assert "--no-grad-sync: the ranks send no gradients" in proc.stdout
    assert mean_gap(one, load_file(tmp_path / "apart" / "model.safetensors")) > 0.3 * moved
    assert json.loads((tmp_path / "apart" / "summary.json").read_text())["grad_sync"] is False


@pytest.mark.multiprocess
def test_a_run_resumed_on_fewer_ranks_continues_the_same_run(tmp_path):
    """2 ranks to step 3, then 1 rank to step 6 (a host lost for good): the same parameters as
    one process that trained all 6 steps on the same global batches."""
    model = make_tiny_model(tmp_path / "model", dropout=0.0, init_range=0.5)
    data = write_csv(tmp_path / "d.csv", sentiment_rows(80, seed=3))
    common = ["--model", str(model), "--train-file", str(data), "--text-columns", "text",
              "--lr", "1e-4", "--precision", "fp32", "--no-progress", "--log-steps", "1",
              "--lr-schedule", "constant", "--warmup-ratio", "0"]
    train([*common, "--batch-size", "8", "--max-steps", "6",
           "--output-dir", str(tmp_path / "one")])
    resumed = tmp_path / "resumed"
    train([*common, "--batch-size", "4", "--max-steps", "3", "--nproc-per-node", "2",
           "--master-port", str(free_port()), "--output-dir", str(resumed),
           "--save-total-limit", "1"])
    proc = train([*common, "--batch-size", "4", "--max-steps", "6", "--resume",
                  "--output-dir", str(resumed)])
    assert "resuming a run of 2 rank(s) on 1: 8 samples a rank" in proc.stdout
    one = load_file(tmp_path / "one" / "model.safetensors")
    two = load_file(resumed / "model.safetensors")
    worst = max(float((one[k] - two[k]).abs().max()) for k in one if ZERO_GRADIENT not in k)
    assert worst <= TOLERANCE, f"parameters differ by {worst}"
    summary = json.loads((resumed / "summary.json").read_text())
    assert (summary["steps"], summary["batch_size"], summary["world_size"]) == (6, 8, 1)
