"""The causal-LM recipe on 2 ranks, on one host and on 2 namespaced hosts, trains what one
process trains on the same global batches; with LoRA only the adapters' gradients are sent."""

import subprocess
import sys

import pytest
from safetensors.torch import load_file

from cpuft.testing.netns import can_make_namespaces, namespace_cluster
from tests.helpers import cpuft_env, free_port, make_tiny_llama, verdict_rows, write_jsonl

pytestmark = pytest.mark.multiprocess
TOLERANCE = 1e-6


def train(argv, cwd, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "cpuft", *argv], capture_output=True,
                          text=True, env=cpuft_env(), timeout=timeout, cwd=cwd)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("where", ["one host", "two namespaced hosts"])
def test_two_ranks_train_the_adapters_one_process_trains(tmp_path, where):
    model = make_tiny_llama(tmp_path / "llama")
    data = write_jsonl(tmp_path / "d.jsonl", verdict_rows(64, seed=5))
    common = ["--recipe", "causal-lm", "--model", str(model), "--train-file", str(data),
              "--max-steps", "4", "--lr", "1e-2", "--precision", "fp32", "--no-progress",
              "--lora-dropout", "0", "--max-eval-samples", "4"]
    train(["train", *common, "--batch-size", "8", "--output-dir", str(tmp_path / "one")],
          tmp_path)
    two = ["train", *common, "--batch-size", "4", "--output-dir", str(tmp_path / "two")]
    if where == "one host":
        train([*two, "--nproc-per-node", "2", "--master-port", str(free_port())], tmp_path)
    else:
        if not can_make_namespaces():
            pytest.fail("namespaced hosts need root and iproute2 (CI has both)")
        with namespace_cluster(2) as cluster:
            hostfile = tmp_path / "hosts"
            hostfile.write_text("".join(f"{h} slots=1\n" for h in cluster.hosts))
            train(["launch", "--hostfile", str(hostfile), "--remote-shell",
                   "ip netns exec {host}", "--", *two], tmp_path)
    one = load_file(tmp_path / "one" / "adapter_model.safetensors")
    two_ranks = load_file(tmp_path / "two" / "adapter_model.safetensors")
    assert one.keys() == two_ranks.keys() and any("lora_A" in k for k in one)
    worst = max(float((one[k] - two_ranks[k]).abs().max()) for k in one)
    assert worst <= TOLERANCE, f"adapters differ by {worst}"
