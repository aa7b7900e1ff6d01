"""A Hugging Face user's flags: TrainingArguments' names mean what they mean in HF, a flag is
never taken for a longer one it begins, and an unknown flag names the nearest real ones."""

from __future__ import annotations

import pytest

from cpuft.cli.flags import HF_NAMES, config_from_args
from cpuft.cli.main import build_parser, main
from cpuft.config.fields import settings

VALUES = {int: "3", float: "0.5", str: "cosine"}
PLAIN = {"model": "some/model", "train_file": "t.csv", "validation_file": "v.csv",
         "test_file": "x.csv", "output_dir": "runs/hf", "metric_for_best_model": "eval_f1",
         "report_to": "tensorboard"}
NEEDS = {"load_best_model_at_end": ("--eval-steps", "2"),
         "metric_for_best_model": ("--eval-steps", "2", "--load-best-model-at-end")}
"""What a setting is refused without."""


def _config(*argv: str):
    return config_from_args(build_parser().parse_args(["train", *argv]))


@pytest.mark.parametrize("name", sorted(HF_NAMES))
def test_each_hf_name_gives_the_config_its_cpuft_flag_gives(name):
    s = settings()[name]
    recipe = ["--recipe", s.recipe] if s.recipe else []
    recipe += NEEDS.get(name, ())
    ours = "--" + name.replace("_", "-")
    for theirs in HF_NAMES[name]:
        if s.kind is bool:
            assert _config(*recipe, theirs) == _config(*recipe, ours)
            continue
        value = PLAIN.get(name, VALUES[s.kind])
        cfg = _config(*recipe, theirs, value)
        assert cfg == _config(*recipe, ours, value)
        assert cfg != _config(*recipe)  # the alias did set something


def test_bf16_asks_for_bf16_and_prefixes_are_not_flags(capsys):
    assert _config("--bf16").speedups.precision == "bf16"
    for prefix, meant in (("--warmup", "--warmup-ratio"), ("--epoch", "--epochs"),
                          ("--save", "--save-steps")):
        with pytest.raises(SystemExit) as caught:
            build_parser().parse_args(["train", prefix, "1"])
        err = capsys.readouterr().err.strip()
        assert caught.value.code == 2 and len(err.splitlines()) == 1, err
        assert f"unknown flag {prefix}; did you mean" in err and meant in err
        assert err.endswith("(see `cpuft train --help`)")


def test_an_unknown_flag_names_the_nearest_of_its_own_command(capsys):
    assert _exit(["plan", "--train-samples", "9", "--seqlen", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "cpuft: unknown flag --seqlen; did you mean --seq-len? (see `cpuft plan --help`)"
    assert _exit(["train", "--learning-rat", "1e-4"]) == 2
    assert "did you mean --learning_rate?" in capsys.readouterr().err
    assert _exit(["slurm", "script", "--nodes", "2", "--tme", "1:00"]) == 2
    assert "(see `cpuft slurm script --help`)" in capsys.readouterr().err


def test_every_help_text_gives_one_default(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: all-MiniLM-L6-v2 for classifier" in out
    for chunk in out.split("--")[1:]:
        assert chunk.count("(default:") <= 1, chunk


def _exit(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


BLOG = ["--model_name_or_path", "some/model", "--do_train", "--do_eval", "--do_predict",
        "--per_device_train_batch_size", "32", "--learning_rate", "2e-5",
        "--num_train_epochs", "3", "--output_dir", "runs/blog", "--overwrite_output_dir",
        "--eval_strategy", "steps", "--eval_steps", "50", "--save_strategy", "no",
        "--logging_strategy", "steps", "--logging_steps", "25", "--use_cpu", "--no_cuda",
        "--optim", "adamw_torch", "--dataloader_num_workers", "4", "--max_steps", "-1",
        "--load_best_model_at_end", "--metric_for_best_model", "eval_accuracy",
        "--greater_is_better", "true", "--label_names", "labels"]


def test_an_hf_command_line_runs_as_typed():
    cfg = _config(*BLOG)
    o, e, out = cfg.optimization, cfg.evaluation, cfg.output
    assert (o.batch_size, o.lr, o.epochs, o.max_steps) == (32, 2e-5, 3.0, 0)
    assert (e.eval_steps, e.load_best_model_at_end, e.metric_for_best_model) == \
        (50, True, "eval_accuracy")
    assert (out.save_steps, out.log_steps, out.overwrite) == (0, 25, True)
    assert cfg.speedups.fused_optimizer  # adamw_torch: the same update, cpuft's kernel


def test_hf_strategies_take_hf_defaults():
    # eval_steps default to logging_steps, and without those to HF's 500, as TrainingArguments
    assert _config("--eval_strategy", "steps", "--logging_steps", "7").evaluation.eval_steps == 7
    assert _config("--eval_strategy", "steps").evaluation.eval_steps == 500
    assert _config("--eval_strategy", "no", "--eval_steps", "9").evaluation.eval_steps == 0
    assert _config("--save_strategy", "steps").output.save_steps == 500
    assert _config("--save_strategy", "steps", "--save_steps", "30").output.save_steps == 30


@pytest.mark.parametrize(("argv", "said"), [
    (["--eval_strategy", "epoch"], "--eval_strategy epoch: cpuft counts by steps"),
    (["--save_strategy", "best"], "--save_strategy best: cpuft counts by steps"),
    (["--logging_strategy", "no"], "--logging_strategy no: cpuft logs to metrics.jsonl"),
    (["--optim", "adafactor"], "--optim adafactor: cpuft trains with AdamW"),
    (["--label_names", "label"], "--label_names label: cpuft's batches call the labels"),
    (["--eval_steps", "2", "--load_best_model_at_end", "--metric_for_best_model", "eval_loss",
      "--greater_is_better", "true"], "--greater_is_better true with --metric_for_best_model "
     "loss: cpuft takes the direction from the name, and loss is lower is better"),
])
def test_an_hf_flag_cpuft_cannot_honour_is_one_line(argv, said, capsys, tmp_path):
    assert _exit(["train", "--output-dir", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err, err


def test_a_json_args_file_reads_as_the_flags_it_names(tmp_path):
    """`cpuft train args.json`, as HfArgumentParser reads `run_glue.py args.json`; flags after
    it win, as a later flag does."""
    import json

    from cpuft.cli.args_file import expand_args_file
    from cpuft.cli.main import _subcommand

    args = tmp_path / "args.json"
    args.write_text(json.dumps({
        "model_name_or_path": "some/model", "do_train": True, "do_eval": False,
        "learning_rate": 3e-5, "per_device_train_batch_size": 16, "overwrite_output_dir": True,
        "eval_strategy": "steps", "eval_steps": 5, "save_strategy": "no", "max_steps": -1,
        "label_names": ["labels"], "bf16": True, "fast_dropout": False, "output_dir": None}))
    parser = build_parser()
    argv = expand_args_file(["train", str(args), "--learning_rate", "1e-4"],
                            _subcommand(parser, "train"))
    cfg = config_from_args(parser.parse_args(argv))
    assert (cfg.model.model, cfg.optimization.lr, cfg.optimization.batch_size) == \
        ("some/model", 1e-4, 16)
    assert (cfg.output.overwrite, cfg.evaluation.eval_steps, cfg.output.save_steps) == \
        (True, 5, 0)
    assert cfg.speedups.precision == "bf16" and not cfg.speedups.fast_dropout


def test_a_json_args_file_cpuft_cannot_take_is_one_line(tmp_path, capsys):
    import json

    args = tmp_path / "args.json"
    args.write_text(json.dumps({"learning_rate": 3e-5, "push_to_hub": True}))
    assert _exit(["train", str(args)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"cpuft: {args}: 'push_to_hub' is not an argument cpuft train takes "
                   "(docs/hf-trainer.md)")
    args.write_text("{not json")
    assert _exit(["train", str(args)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.count(str(args)) == 1 and "JSON" in err


@pytest.mark.parametrize(("name", "text"), [
    ("train.yaml", "learning_rate: 3.0e-5\nper_device_train_batch_size: 16\n"),
    ("train.toml", "learning_rate = 3e-5\nper_device_train_batch_size = 16\n"),
    ("train.json", '{"learning_rate": 3e-5, "per_device_train_batch_size": 16}'),
])
def test_config_files_take_hf_names(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    cfg = _config("--config", str(path))
    assert (cfg.optimization.lr, cfg.optimization.batch_size) == (3e-5, 16)


def test_warmup_steps_as_hf_5_reads_them(capsys, tmp_path):
    assert _config("--warmup_steps", "0.1").optimization.warmup_ratio == 0.1
    steps = _config("--warmup_steps", "30").optimization
    assert (steps.warmup_steps, steps.warmup_ratio) == (30, 0.06)
    assert _exit(["train", "--output-dir", str(tmp_path / "x"), "--warmup_steps", "2.5"]) == 2
    assert "--warmup_steps 2.5: a whole number of steps" in capsys.readouterr().err


def test_warmup_steps_reach_the_schedule():
    from cpuft.job.build import fit_config
    from cpuft.runtime import preview

    for flag, steps in (("30", 30), ("0.2", 20)):
        cfg = _config("--warmup_steps", flag, "--precision", "fp32")
        assert fit_config(cfg, preview(cfg), total_steps=100).warmup_steps == steps


@pytest.mark.parametrize(("argv", "said"), [
    (["--learning_rate", "1e-3", "--lr", "5e-5"], "--learning_rate 0.001 and --lr 5e-05"),
    (["--bf16", "--precision", "fp32"], "--bf16 bf16 and --precision fp32"),
    (["--per_device_train_batch_size", "4", "--batch-size", "8"],
     "--per_device_train_batch_size 4 and --batch-size 8"),
    (["--overwrite_output_dir", "--no-overwrite"], "--overwrite_output_dir True and --overwrite"),
])
def test_one_setting_by_two_spellings_with_two_values_is_refused(argv, said, capsys, tmp_path):
    assert _exit(["train", "--output-dir", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "give one of them" in err, err


def test_two_spellings_that_agree_and_hfs_bf16_values_are_taken():
    assert _config("--learning_rate", "1e-3", "--lr", "0.001").optimization.lr == 1e-3
    assert _config("--lr", "1", "--lr", "2").optimization.lr == 2.0  # one spelling: the last
    assert _config("--fast-dropout", "--no-fast-dropout").speedups.fast_dropout is False
    for argv, precision in ((["--bf16"], "bf16"), (["--bf16", "True"], "bf16"),
                            (["--bf16", "false"], "fp32"), (["--bf16", "--precision", "bf16"],
                                                            "bf16")):
        assert _config(*argv).speedups.precision == precision, argv
