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
