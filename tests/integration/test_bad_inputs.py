"""A table of bad inputs through the command line: each ends with exit code 2, one line on
stderr naming the problem and no traceback, and a finished run in the output folder (which
each is told to --overwrite) is still there, as it was."""

import hashlib
import shutil
from pathlib import Path

import pytest

from cpuft.cli.main import main
from tests.helpers import sentiment_rows, write_csv


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("bad-inputs")
    data = write_csv(root / "good.csv", sentiment_rows(40, seed=2))
    finished = root / "finished"
    assert main(["train", "--model", str(tiny_model), "--train-file", str(data),
                 "--text-columns", "text", "--max-steps", "2", "--no-progress",
                 "--output-dir", str(finished)]) == 0
    cut = root / "cut-model"
    shutil.copytree(tiny_model, cut)
    (cut / "model.safetensors").write_bytes((tiny_model / "model.safetensors").read_bytes()[:99])
    (root / "one.csv").write_text("text,label\ngood fun,pos\n")
    (root / "header.csv").write_text("text,label\n")
    (root / "two.csv").write_text("text,label\ngood fun,pos\nbad dull,neg\n")
    rows = "".join(f"{t},{label}\n" for t, label in sentiment_rows(20, seed=3))
    (root / "nan.csv").write_text(f"text,label\n{rows}meh,NaN\n")
    (root / "na.csv").write_text(f"text,label\n{rows}meh,NA\n")
    (root / "mixed.csv").write_text(f"text,label\n{rows}ok,1\nfine,0\n")
    (root / "cosine.toml").write_text('lr_schedule = "cosine_with_hard_restarts"\n')
    (root / "afile").write_text("x")
    (root / "link").symlink_to(finished)
    return {"root": root, "model": tiny_model, "data": data, "finished": finished, "cut": cut}


def fingerprint(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


CASES = {
    "truncated weights": (["--model", "{cut}"], "the weights file is damaged or cut short"),
    "one row": (["--train-file", "{root}/one.csv"], "1 row(s) are too few"),
    "header only": (["--train-file", "{root}/header.csv"], "the file has no rows"),
    "one row a class": (["--train-file", "{root}/two.csv"],
                        "the training split (after holding out the validation rows) has one "
                        "class"),
    "NaN label": (["--train-file", "{root}/nan.csv"], "has no label in column 'label' ('NaN')"),
    "NA label": (["--train-file", "{root}/na.csv"], "has no label in column 'label' ('NA')"),
    "mixed labels": (["--train-file", "{root}/mixed.csv"], "the labels mix numbers (0, 1) and "
                                                           "words (neg, pos)"),
    "epochs inf": (["--epochs", "inf"], "--epochs must be a finite number"),
    "schedule in a config file": (["--config", "{root}/cosine.toml"],
                                  "'cosine_with_hard_restarts' is not one of linear, cosine"),
    "parent is a file": (["--output-dir", "{root}/afile/sub"], "is a file, not a folder"),
    "output dir a symlink": (["--output-dir", "{root}/link"], "is a symbolic link"),
    "unwritable output dir": (["--output-dir", "/proc/cpuft-run"], "cannot write in /proc"),
    "loss blows up mid-run": (["--lr", "1e30", "--max-steps", "20"], "loss became"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_ends_in_one_line_and_keeps_the_finished_run(case, world, capsys):
    flags, message = CASES[case]
    before = fingerprint(world["finished"])
    argv = ["train", "--model", str(world["model"]), "--train-file", str(world["data"]),
            "--text-columns", "text", "--max-steps", "2", "--no-progress", "--overwrite",
            "--output-dir", str(world["finished"])]
    argv += [flag.format(**{k: str(v) for k, v in world.items()}) for flag in flags]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("cpuft: "), err
    assert message in err and "Traceback" not in err
    assert fingerprint(world["finished"]) == before
    assert not list(world["root"].glob(".finished.previous-*"))


def test_a_damaged_checkpoint_names_the_newest_that_loads(world, capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--model", str(world["model"]), "--train-file", str(world["data"]),
                 "--text-columns", "text", "--max-steps", "4", "--save-steps", "2",
                 "--save-total-limit", "2", "--no-progress", "--output-dir", str(out)]) == 0
    (out / "checkpoint-4" / "state.pt").write_bytes(b"\x00\x13random bytes" * 50)
    code = main(["train", "--model", str(world["model"]), "--train-file", str(world["data"]),
                 "--text-columns", "text", "--max-steps", "6", "--no-progress", "--resume",
                 "--output-dir", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"checkpoint {out / 'checkpoint-4'} is damaged" in err
    assert f"{out / 'checkpoint-2'} loads" in err and "weights_only" not in err


def test_resume_over_a_half_written_metrics_line_and_a_damaged_compile_cache(
        world, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CPUFT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "compile.json").write_text("[]")
    out = tmp_path / "run"
    argv = ["train", "--model", str(world["model"]), "--train-file", str(world["data"]),
            "--text-columns", "text", "--no-progress", "--log-steps", "1", "--save-steps", "2",
            "--save-total-limit", "2", "--output-dir", str(out)]
    assert main([*argv, "--max-steps", "2"]) == 0
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "lo')  # a run stopped as it wrote
    assert main([*argv, "--max-steps", "4", "--resume"]) == 0
    steps = [line for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [int(line.split('"step": ')[1].split(",")[0]) for line in steps] == [1, 2, 3, 4]
