"""`cpuft train --recipe causal-lm` for real on a tiny Llama: LoRA and full runs, merge, resume,
the memory refusal and bad inputs."""

import json

import pytest
import torch
from safetensors.torch import load_file

from cpuft.cli.main import main
from tests.helpers import make_tiny_llama, make_tiny_model, verdict_rows, write_jsonl


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verdicts")
    return (write_jsonl(folder / "train.jsonl", verdict_rows(64, seed=1)),
            write_jsonl(folder / "test.jsonl", verdict_rows(16, seed=2)))


def train(llama, data, out, *extra):
    argv = ["train", "--recipe", "causal-lm", "--model", str(llama), "--train-file",
            str(data[0]), "--test-file", str(data[1]), "--batch-size", "8", "--lr", "1e-2",
            "--no-progress", "--output-dir", str(out), *extra]
    return main(argv)


def summary(out):
    return json.loads((out / "summary.json").read_text())


def test_lora_run_learns_and_reports_before_and_after(llama, verdicts, tmp_path):
    out = tmp_path / "lora"
    assert train(llama, verdicts, out, "--max-steps", "30", "--merge") == 0
    s = summary(out)
    assert s["lora"]["r"] == 8 and 0 < s["trainable_parameters"] < s["parameters"] / 2
    for where in (s, s["before"]):
        assert set(where["eval"]) == {"loss", "perplexity", "accuracy"}
        assert where["eval"]["perplexity"] == pytest.approx(2.718281828 ** where["eval"]["loss"])
        assert 0 <= where["test"]["accuracy"] <= 1
    assert s["eval"]["loss"] < s["before"]["eval"]["loss"]  # fine-tuning bought something
    assert s["peak_memory_mb"] > 0
    assert (out / "adapter_config.json").is_file() and (out / "merged" / "config.json").is_file()


def test_merged_model_gives_the_adapters_logits(llama, verdicts, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "lora"
    assert train(llama, verdicts, out, "--max-steps", "6", "--merge") == 0
    ids = torch.tensor([[4, 5, 16, 18, 6, 5]])
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(llama), out)
        merged = AutoModelForCausalLM.from_pretrained(out / "merged")
        torch.testing.assert_close(merged(ids).logits, adapted(ids).logits, rtol=1e-5,
                                   atol=1e-5)
        base = AutoModelForCausalLM.from_pretrained(llama)
        assert not torch.allclose(base(ids).logits, merged(ids).logits)


def test_full_fine_tuning_trains_every_weight(llama, verdicts, tmp_path):
    out = tmp_path / "full"
    assert train(llama, verdicts, out, "--max-steps", "120", "--lr", "3e-3", "--lora-r",
                 "0") == 0
    s = summary(out)
    assert s["lora"] is None and s["trainable_parameters"] == s["parameters"]
    # the verdict follows from the review's words: a model that learnt picks it
    assert s["test"]["accuracy"] >= 0.8 > s["before"]["test"]["accuracy"]
    trained = load_file(out / "model.safetensors")
    initial = load_file(llama / "model.safetensors")
    assert all(not torch.equal(trained[k], initial[k]) for k in initial if "norm" not in k)


def test_resume_is_exact(llama, verdicts, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert train(llama, verdicts, straight, "--max-steps", "6") == 0
    assert train(llama, verdicts, resumed, "--max-steps", "6", "--save-steps", "3",
                 "--save-total-limit", "2") == 0
    (resumed / "summary.json").unlink()
    for name in ("adapter_model.safetensors", "checkpoint-6"):
        path = resumed / name
        if path.is_dir():
            import shutil

            shutil.rmtree(path)
        else:
            path.unlink()
    assert train(llama, verdicts, resumed, "--max-steps", "6", "--resume") == 0
    assert summary(resumed)["before"] == summary(straight)["before"]  # kept from the start
    a = load_file(straight / "adapter_model.safetensors")
    b = load_file(resumed / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_too_big_for_the_node_is_refused_before_loading(llama, verdicts, tmp_path,
                                                             capsys):
    code = train(llama, verdicts, tmp_path / "big", "--batch-size", "100000000",
                 "--max-seq-length", "128", "--lora-r", "0")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "this run needs about" in err and "GiB" in err


@pytest.mark.parametrize(("case", "message"), [
    ("no text", "expected 'text', or 'prompt' and 'response', or 'messages'"),
    ("no assistant", "no assistant turn"),
    ("not a causal lm", "not a causal language model"),
    ("targets match nothing", "--lora-targets nosuch_proj"),
    ("unknown task", "unknown task 'squad': use rotten_tomatoes_verdicts, rotten_tomatoes_text"),
])
def test_bad_inputs_end_in_one_line(llama, verdicts, tmp_path, capsys, case, message):
    data, model, extra = verdicts, llama, []
    if case == "no text":
        data = (write_jsonl(tmp_path / "t.jsonl", [{"title": "x"}]), verdicts[1])
    elif case == "no assistant":
        data = (write_jsonl(tmp_path / "t.jsonl",
                            [{"messages": [{"role": "user", "content": "hi"}]}]), verdicts[1])
    elif case == "not a causal lm":
        model = make_tiny_model(tmp_path / "bert")
    elif case == "unknown task":
        extra = ["--task", "squad"]
    else:
        extra = ["--lora-targets", "nosuch_proj"]
    code = train(model, data, tmp_path / "out", "--max-steps", "2", *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert message in err


def test_a_gguf_file_loads_dequantized_and_trains(verdicts, tmp_path):
    from tests.helpers import write_tiny_gguf

    gguf_file = write_tiny_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "from-gguf"
    assert train(gguf_file, verdicts, out, "--max-steps", "3") == 0
    s = summary(out)
    assert s["model"] == "tiny.gguf" and s["steps"] == 3  # by name: no path of this machine
    assert s["eval"]["loss"] < s["before"]["eval"]["loss"]
    assert (out / "adapter_model.safetensors").is_file()


def test_a_gguf_file_fine_tuned_in_full_saves_a_model_that_loads(verdicts, tmp_path):
    from transformers import AutoModelForCausalLM

    from cpuft.recipes.hf_models import load_causal_lm
    from tests.helpers import write_tiny_gguf

    gguf_file = write_tiny_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "full-from-gguf"
    assert train(gguf_file, verdicts, out, "--max-steps", "2", "--lora-r", "0") == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    assert getattr(model.config, "quantization_config", None) is None
    # Loaded for training, the dequantized model is no longer marked quantized (HF Trainer
    # refuses to train a model marked so, and save_pretrained to save it).
    loaded, _ = load_causal_lm(str(gguf_file.parent), gguf_file.name)
    assert not loaded.is_quantized and getattr(loaded, "hf_quantizer", None) is None


def test_lora_checkpoints_hold_the_adapters_not_the_base(llama, verdicts, tmp_path):
    out = tmp_path / "lora"
    assert train(llama, verdicts, out, "--max-steps", "2", "--save-total-limit", "1") == 0
    state = torch.load(out / "checkpoint-2" / "state.pt", weights_only=True)["model"]
    assert state and all("lora_" in k for k in state)


def test_the_built_in_tasks_are_the_snippets_as_verdicts_and_as_text():
    from cpuft.recipes.causal_lm import DEFAULT_TASK, TEXT_TASK, builtin_rows

    verdicts, text = builtin_rows(DEFAULT_TASK), builtin_rows(TEXT_TASK)
    assert set(verdicts) == set(text) == {"train", "validation", "test"}
    prompt, response = verdicts["test"].rows[0]
    assert prompt == f"Review: {text['test'].rows[0]}\nVerdict:"
    assert response in (" fresh", " rotten") and text["test"].kind == "text"
    assert len(verdicts["train"].rows) == len(text["train"].rows) > 10000


def test_resume_refuses_other_adapters(llama, verdicts, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(llama, verdicts, out, "--max-steps", "2", "--save-steps", "1",
                 "--save-total-limit", "1") == 0
    code = train(llama, verdicts, out, "--max-steps", "4", "--resume", "--lora-r", "4")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--lora-r was 8, now 4" in err


def test_a_length_that_leaves_nothing_to_learn_is_refused(llama, verdicts, tmp_path, capsys):
    out = tmp_path / "short"
    assert train(llama, verdicts, out, "--max-seq-length", "4", "--max-steps", "2") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cpuft: train: no record keeps a token to learn within "
                          "--max-seq-length 4: the first counted token comes at token ")
    assert "raise --max-seq-length" in err and len(err.splitlines()) == 1
    assert not (out / "metrics.jsonl").exists()


def test_records_with_nothing_to_learn_are_left_out_and_counted(llama, tmp_path, capsys):
    long_prompt = "review: " + " ".join(["the movie was really very"] * 6) + " good verdict:"
    rows = [*verdict_rows(24, seed=4),
            *({"prompt": long_prompt, "response": " fresh"} for _ in range(8))]
    data = (write_jsonl(tmp_path / "train.jsonl", rows),
            write_jsonl(tmp_path / "test.jsonl", verdict_rows(8, seed=5)))
    out = tmp_path / "run"
    assert train(llama, data, out, "--max-seq-length", "24", "--max-steps", "2") == 0
    said = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    left = summary["records_left_out"]
    assert left and sum(left.values()) == 8, left
    assert all(f"{n} of " in said for n in left.values())
    assert "nothing of them to learn within --max-seq-length 24" in said
    assert summary["eval"]["loss"] > 0 and summary["final_loss"] == summary["final_loss"]


def test_an_adapter_on_a_gguf_base_loads_from_a_copy_as_its_card_says(verdicts, tmp_path):
    import re
    import shutil
    import subprocess
    import sys

    from transformers import AutoModelForCausalLM

    from cpuft.recipes.adapter_card import ADAPTER
    from tests.helpers import cpuft_env, write_tiny_gguf

    (tmp_path / "base").mkdir()
    gguf_file = write_tiny_gguf(tmp_path / "base" / "tiny.gguf")
    out = tmp_path / "trained"
    assert train(gguf_file, verdicts, out, "--max-steps", "4", "--merge") == 0
    ids = [[4, 5, 16, 18, 6, 5]]
    with torch.no_grad():  # the base with the adapter merged in, as training saved it
        expected = AutoModelForCausalLM.from_pretrained(out / "merged")(
            torch.tensor(ids)).logits[0, -1]
        plain = AutoModelForCausalLM.from_pretrained(
            str(gguf_file.parent), gguf_file=gguf_file.name)(torch.tensor(ids)).logits[0, -1]
    copy = tmp_path / "elsewhere" / "adapter"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("merged", "checkpoint-*"))
    shutil.rmtree(out)  # nothing of the training machine's folder is left to lean on
    for path in copy.iterdir():  # but the run's own record of its settings, for a resume
        if path.is_file() and path.suffix in (".json", ".md", ".jinja") \
                and path.name != "cpuft_run.json":
            text = path.read_text()
            assert str(tmp_path) not in text and sys.prefix not in text, path.name
    assert json.loads((copy / "adapter_config.json").read_text())[
        "base_model_name_or_path"] == "tiny.gguf"
    [code] = re.findall(r"```python\n(.*?)```", (copy / "README.md").read_text(), re.S)[:1]
    code = code.replace("path/to/the/gguf/folder", str(gguf_file.parent)).replace(
        ADAPTER, str(copy))
    script = (code + "\nimport json, torch\nmodel.eval()\nwith torch.no_grad():\n"
              f"    print(json.dumps(model(torch.tensor({ids})).logits[0, -1].tolist()))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=cpuft_env(), timeout=300, cwd=tmp_path / "elsewhere")
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = torch.tensor(json.loads(proc.stdout.strip().splitlines()[-1]))
    torch.testing.assert_close(loaded, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(loaded, plain, atol=1e-3)  # the adapter acts
