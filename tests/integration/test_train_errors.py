"""Every bad input ends with one line on stderr and exit code 2, before training starts."""

import subprocess
import sys

import pytest

from cpuft.cli.main import main
from tests.helpers import cpuft_env, sentiment_rows, write_csv


def run_main(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


def base(tiny_model, out, *extra):
    return ["train", "--model", str(tiny_model), "--output-dir", str(out), "--no-progress",
            "--max-steps", "2", *extra]


@pytest.fixture
def good_csv(tmp_path):
    return write_csv(tmp_path / "good.csv", sentiment_rows(30))


def assert_clean_failure(code, err, out, pattern):
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("cpuft: ")
    assert pattern in err
    assert not (out / "metrics.jsonl").exists()


def test_missing_column(capsys, tiny_model, tmp_path, good_csv):
    out = tmp_path / "o"
    code, err = run_main(capsys, base(tiny_model, out, "--train-file", str(good_csv),
                                      "--text-columns", "review"))
    assert_clean_failure(code, err, out, "no column 'review'")


def test_unknown_task(capsys, tiny_model, tmp_path):
    out = tmp_path / "o"
    code, err = run_main(capsys, base(tiny_model, out, "--task", "squad"))
    assert_clean_failure(code, err, out, "unknown task 'squad'")


def test_empty_file(capsys, tiny_model, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    out = tmp_path / "o"
    code, err = run_main(capsys, base(tiny_model, out, "--train-file", str(tmp_path / "empty.csv"),
                                      "--text-columns", "text"))
    assert_clean_failure(code, err, out, "is empty")


def test_unreadable_file(capsys, tiny_model, tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"this is not parquet at all")
    out = tmp_path / "o"
    code, err = run_main(capsys, base(tiny_model, out, "--train-file", str(bad),
                                      "--text-columns", "text"))
    assert_clean_failure(code, err, out, "cannot read it as parquet")


def test_label_the_map_does_not_know(capsys, tiny_model, tmp_path, good_csv):
    val = write_csv(tmp_path / "val.csv", [("good film", "pos"), ("odd film", "meh")])
    out = tmp_path / "o"
    code, err = run_main(capsys, base(tiny_model, out, "--train-file", str(good_csv),
                                      "--validation-file", str(val), "--text-columns", "text"))
    assert_clean_failure(code, err, out, "label 'meh'")


def test_model_folder_without_weights(capsys, tmp_path, good_csv):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    out = tmp_path / "o"
    code, err = run_main(capsys, base(folder, out, "--train-file", str(good_csv),
                                      "--text-columns", "text"))
    assert_clean_failure(code, err, out, "no weights")


def test_output_dir_with_another_run(capsys, tiny_model, tmp_path, good_csv):
    out = tmp_path / "o"
    args = base(tiny_model, out, "--train-file", str(good_csv), "--text-columns", "text")
    assert main(args) == 0
    before = (out / "metrics.jsonl").read_text()
    capsys.readouterr()
    code, err = run_main(capsys, args)
    assert code == 2 and "holds another run" in err and "--overwrite" in err
    assert (out / "metrics.jsonl").read_text() == before
    assert main([*args, "--overwrite"]) == 0


def test_overwrite_keeps_the_old_run_when_the_new_one_fails_its_checks(capsys, tiny_model,
                                                                       tmp_path, good_csv):
    out = tmp_path / "o"
    args = base(tiny_model, out, "--train-file", str(good_csv), "--text-columns", "text")
    assert main(args) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    code, err = run_main(capsys, [*args, "--overwrite", "--label-column", "stars"])
    assert code == 2 and "stars" in err
    assert sorted(p.name for p in out.iterdir()) == before


def test_hub_id_offline(capsys, tmp_path, good_csv):
    out = tmp_path / "o"
    code, err = run_main(capsys, base("someone/some-model", out, "--train-file", str(good_csv),
                                      "--text-columns", "text"))
    assert_clean_failure(code, err, out, "HF_HUB_OFFLINE")
    assert "--model DIR" in err


def test_bad_flag_value_through_the_real_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cpuft", "train", "--batch-size", "many"],
                          capture_output=True, text=True, env=cpuft_env(), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("cpuft: ") and "Traceback" not in proc.stderr


def test_hub_id_unreachable_without_offline_flag(capsys, monkeypatch, tmp_path, good_csv):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    out = tmp_path / "o"
    code, err = run_main(capsys, base("someone/some-model", out, "--train-file", str(good_csv),
                                      "--text-columns", "text"))
    assert_clean_failure(code, err, out, "offline")


@pytest.mark.parametrize("extra, setting, owner", [
    (["--lora-r", "16"], "--lora-r", "causal-lm"),
    (["--merge"], "--merge", "causal-lm"),
    (["--gradient-checkpointing"], "--gradient-checkpointing", "causal-lm"),
    (["--recipe", "causal-lm", "--text-columns", "text"], "--text-columns", "classifier"),
])
def test_another_recipes_setting_is_refused(capsys, tiny_model, tmp_path, extra, setting, owner):
    out = tmp_path / "o"
    code, err = run_main(capsys, base(tiny_model, out, *extra))
    assert_clean_failure(code, err, out, f"{setting} is a setting of the {owner} recipe")


@pytest.mark.parametrize("text", ["[causal-lm]\nlora_alpha = 32\n", "lora-alpha = 32\n"])
def test_another_recipes_setting_in_a_config_file_is_refused(capsys, tiny_model, tmp_path,
                                                             text):
    (tmp_path / "run.toml").write_text(text)
    out = tmp_path / "o"
    code, err = run_main(capsys, base(tiny_model, out, "--config", str(tmp_path / "run.toml")))
    assert_clean_failure(code, err, out, "--lora-alpha is a setting of the causal-lm recipe")
