"""cpuft train's evaluation while training, its best model, its kept checkpoints and its
TensorBoard events, on the tiny BERT."""

import json

import pytest

from cpuft.cli.main import main
from tests.helpers import sentiment_rows, train_args, write_csv


def test_evaluations_the_best_model_and_tensorboard_events(tiny_model, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    data = write_csv(tmp_path / "reviews.csv", sentiment_rows(60, seed=4))
    out = tmp_path / "run"
    assert main(train_args(tiny_model, data, out, "--max-steps", "6", "--eval_steps", "2",
                           "--load_best_model_at_end", "--metric_for_best_model",
                           "eval_accuracy", "--precision", "fp32", "--log-steps", "2",
                           "--report_to", "tensorboard")) == 0
    summary = json.loads((out / "summary.json").read_text())
    evaluations = summary["evaluations"]
    assert [e["step"] for e in evaluations] == [2, 4, 6]
    assert all(0 <= e["eval_accuracy"] <= 1 and "eval_f1" in e for e in evaluations)
    best = max(evaluations, key=lambda e: e["eval_accuracy"])  # the first of equals
    assert summary["best"] == {"step": best["step"], "eval_accuracy": best["eval_accuracy"]}
    # The saved model is the best one: evaluated again, it scores what it scored then.
    assert summary["eval"]["accuracy"] == best["eval_accuracy"]
    assert not list(out.glob("checkpoint-*"))  # the model is saved: no checkpoint kept

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = events.Tags()
    # HF Trainer's tag names, so that dashboards made for Trainer runs read cpuft's
    assert {"train/loss", "train/learning_rate", "train/grad_norm", "train/epoch",
            "eval/accuracy", "eval/f1"} <= set(tags["scalars"])
    assert [e.step for e in events.Scalars("train/loss")] == [2, 4, 6]
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
              if '"loss"' in line]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx(
        [r["loss"] for r in logged], rel=1e-6)
    norms = [r["grad_norm"] for r in logged]
    assert all(n > 0 for n in norms)
    assert [e.value for e in events.Scalars("train/grad_norm")] == pytest.approx(norms, rel=1e-6)
    # the run's settings, as Trainer writes its arguments: hyperparameters and the args text
    assert events.PluginTagToContent("hparams")
    text = events.Tensors("args/text_summary")[0].tensor_proto.string_val[0].decode()
    assert json.loads(text)["max_steps"] == 6 and json.loads(text)["eval_steps"] == 2
    assert [e.value for e in events.Scalars("eval/accuracy")] == pytest.approx(
        [e["eval_accuracy"] for e in evaluations], rel=1e-6)


def test_save_total_limit_keeps_the_newest(tiny_model, tmp_path):
    data = write_csv(tmp_path / "reviews.csv", sentiment_rows(44, seed=2))
    out = tmp_path / "run"
    assert main(train_args(tiny_model, data, out, "--max-steps", "5", "--save-steps", "1",
                           "--save-total-limit", "3")) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [
        "checkpoint-3", "checkpoint-4", "checkpoint-5"]


def test_best_model_settings_without_evaluation_are_refused(tiny_model, tmp_path, capsys):
    data = write_csv(tmp_path / "reviews.csv", sentiment_rows(20, seed=2))
    for extra, said in (
            (["--load-best-model-at-end"], "need --eval-steps"),
            (["--eval-steps", "2", "--metric-for-best-model", "f1"],
             "add --load-best-model-at-end"),
            (["--eval-steps", "2", "--load-best-model-at-end", "--metric-for-best-model",
              "bleu"], "--metric-for-best-model bleu: the evaluation gives accuracy, f1")):
        assert main(train_args(tiny_model, data, tmp_path / "x", "--max-steps", "2",
                               "--overwrite", *extra)) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, err


def test_the_last_evaluation_is_not_taken_again_at_the_end(tiny_model, tmp_path, monkeypatch):
    from cpuft.recipes import classifier

    splits = []
    scored = classifier.evaluate

    def counted(model, data, *args, **kwargs):
        splits.append(len(data))
        return scored(model, data, *args, **kwargs)

    monkeypatch.setattr(classifier, "evaluate", counted)
    data = write_csv(tmp_path / "reviews.csv", sentiment_rows(60, seed=4))
    out = tmp_path / "run"
    assert main(train_args(tiny_model, data, out, "--max-steps", "6", "--eval-steps", "3",
                           "--precision", "fp32")) == 0
    summary = json.loads((out / "summary.json").read_text())
    last = summary["evaluations"][-1]
    assert last["step"] == 6
    assert summary["eval"] == {k.removeprefix("eval_"): v for k, v in last.items()
                               if k.startswith("eval_")}
    # the validation split at steps 3 and 6, and not again at the end (no test split here)
    assert len(splits) == 2 and summary.get("test") is None, splits
