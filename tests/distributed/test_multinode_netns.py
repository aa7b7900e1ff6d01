"""Multi-node training for real on one machine: hosts are network namespaces, the remote shell
is `ip netns exec {host}`, and `cpuft launch --launcher ssh` starts one torchrun per host."""

import json
import subprocess
import sys

import pytest

from cpuft.testing.netns import can_make_namespaces, namespace_cluster
from tests.helpers import cpuft_env, make_tiny_model, sentiment_rows, write_csv

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)"),
]


@pytest.mark.parametrize("nodes", [2, 3])
def test_launch_over_namespaced_hosts(tmp_path, nodes):
    model = make_tiny_model(tmp_path / "model")
    data = write_csv(tmp_path / "d.csv", sentiment_rows(120, seed=4))
    with namespace_cluster(nodes) as cluster:
        hostfile = tmp_path / "hosts"
        hostfile.write_text("".join(f"{h} slots=1\n" for h in cluster.hosts))
        proc = subprocess.run(
            [sys.executable, "-m", "cpuft", "launch", "--hostfile", str(hostfile),
             "--remote-shell", "ip netns exec {host}", "--", "train", "--model", str(model),
             "--train-file", str(data), "--text-columns", "text", "--batch-size", "4",
             "--max-steps", "5", "--no-progress", "--output-dir", str(tmp_path / "out")],
            capture_output=True, text=True, env=cpuft_env(), timeout=300, cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["world_size"], summary["nodes"], summary["backend"]) == (nodes, nodes, "gloo")
    assert summary["steps"] == 5 and (tmp_path / "out" / "model.safetensors").is_file()
    assert summary["precision"] in ("bf16", "fp32")  # the ranks' vote ended
    first = cluster.hosts[0]
    assert f"[{first}:0] trained 5 steps" in proc.stdout
    # rank 0 alone logs progress and writes; the other ranks print nothing of their own
    assert not any(f"[{h}:" in proc.stdout for h in cluster.hosts[1:])
    # every host finds its peers' names in its namespace's hosts file, not in unreachable DNS
    assert "cannot be retrieved" not in proc.stdout + proc.stderr


def _scaling_report(tmp_path, *flags):
    """Run ``cpuft bench --scaling`` on a tiny model, 4 steps of 8; its JSON report."""
    model = make_tiny_model(tmp_path / "model")
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "bench", "--scaling", "--models", str(model),
         "--steps", "4", "--global-batch", "8", "--max-seq-length", "32",
         "--output-dir", str(tmp_path / "b"), *flags],
        capture_output=True, text=True, env=cpuft_env(), timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_bench_scaling_reports_efficiency(tmp_path):
    report = _scaling_report(tmp_path, "--rate", "1gbit")
    assert set(report["configs"]) == {"1-node", "2-nodes", "2-nodes-bf16", "2-nodes-powersgd",
                                      "2-nodes-nosync"}
    assert report["configs"]["2-nodes-nosync"]["comm_fraction"] == 0
    assert report["scaling_efficiency"] == pytest.approx(
        report["no_communication_efficiency"] * report["communication_keeps"])
    halves = report["batch_halves"]
    assert halves["whole_seconds"] > 0 and halves["halves_seconds"] > 0
    assert report["machine_ceiling"] == pytest.approx(
        halves["whole_seconds"] / halves["halves_seconds"])
    assert report["scaling_efficiency"] == pytest.approx(
        report["machine_ceiling"] * report["communication_efficiency"])
    assert report["efficiency_vs_best_one_node"] == pytest.approx(
        report["scaling_efficiency"] / max(1.0, report["machine_ceiling"]))
    assert report["target_met"] == (report["efficiency_vs_best_one_node"] >= 0.95)
    assert report["configs"]["2-nodes"]["nodes"] == 2
    assert report["scaling_efficiency"] > 0 and 0 <= report["comm_fraction"] < 1
    assert report["scaling_efficiency_powersgd"] > 0
    assert all(0 <= c["accuracy"] <= 1 for c in report["configs"].values())
    assert all(0 <= c["steal_fraction"] < 1 for c in report["configs"].values())
    assert report["rate"] == "1gbit"
    assert json.loads((tmp_path / "b" / "scaling.json").read_text()) == report
    assert (tmp_path / "b" / "scaling.png").stat().st_size > 0


@pytest.mark.slow
def test_bench_scaling_with_accumulation_splits_each_step_into_micro_batches(tmp_path):
    report = _scaling_report(tmp_path, "--grad-accum", "2", "--compressions", "none")
    assert (report["global_batch"], report["grad_accum"]) == (8, 2)
    one, two = report["configs"]["1-node"], report["configs"]["2-nodes"]
    # 8 samples a step: 1 node as 2 micro-batches of 4, each of 2 nodes as 2 of 2
    assert (one["batch_size"], one["grad_accum"]) == (4, 2)
    assert (two["batch_size"], two["grad_accum"]) == (2, 2)
    assert report["batch_halves"]["grad_accum"] == 2
    assert report["batch_halves"]["whole_seconds"] > 0


def test_a_rank_killed_on_one_host_stops_every_host(tmp_path):
    import uuid

    from tests.helpers import kill_rank_and_expect_stop

    model = make_tiny_model(tmp_path / "model")
    data = write_csv(tmp_path / "d.csv", sentiment_rows(120, seed=4))
    tag = uuid.uuid4().hex
    out = tmp_path / "out"
    with namespace_cluster(2, subnet=234) as cluster:
        hostfile = tmp_path / "hosts"
        hostfile.write_text("".join(f"{h}\n" for h in cluster.hosts))
        launcher = subprocess.Popen(
            [sys.executable, "-m", "cpuft", "launch", "--hostfile", str(hostfile),
             "--remote-shell", "ip netns exec {host}", "--nproc-per-node", "1", "--", "train",
             "--model", str(model), "--train-file", str(data), "--text-columns", "text",
             "--batch-size", "4", "--max-steps", "5000", "--log-steps", "1", "--no-progress",
             "--output-dir", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=cpuft_env(CPUFT_TEST_TAG=tag), cwd=tmp_path,
        )
        kill_rank_and_expect_stop(launcher, tag, out, cluster.hosts[1])
