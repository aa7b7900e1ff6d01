import json

import pytest

from cpuft.config import ClassifierConfig, DataConfig
from cpuft.data.prepare import load_labelled
from tests.helpers import sentiment_rows, write_csv

ROWS = sentiment_rows(40, seed=1)


def write_format(tmp_path, suffix):
    path = tmp_path / f"train{suffix}"
    records = [{"review": t, "y": lab} for t, lab in ROWS]
    if suffix == ".csv":
        write_csv(path, ROWS, header=("review", "y"))
    elif suffix == ".tsv":
        write_csv(path, ROWS, header=("review", "y"), delimiter="\t")
    elif suffix == ".json":
        path.write_text(json.dumps(records))
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif suffix == ".parquet":
        import pandas as pd

        pd.DataFrame(records).to_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".json", ".jsonl", ".parquet"])
def test_every_format_loads_and_holds_out_a_seeded_split(tmp_path, suffix):
    path = write_format(tmp_path, suffix)
    cfg = DataConfig(train_file=str(path), validation_split=0.25)
    columns = ClassifierConfig(text_columns=["review"], label_column="y")
    data = load_labelled(cfg, columns)
    assert data.size("train") == 30 and data.size("validation") == 10
    assert data.label_map.labels == ("neg", "pos")
    assert data.metrics == ("accuracy", "f1")
    again = load_labelled(cfg, columns)
    assert again.texts["validation"] == data.texts["validation"]


def test_regression_labels_and_two_text_columns(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(
        json.dumps({"a": f"good {i}", "b": "film", "score": i / 3}) + "\n" for i in range(12)))
    data = load_labelled(DataConfig(train_file=str(path)),
                         ClassifierConfig(text_columns=["a", "b"], label_column="score"))
    assert data.label_map.regression and data.metrics == ("pearson", "spearman")
    assert all(len(t) == 2 for t in data.texts["train"])


GLUE = {
    "mrpc": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n", "{y}\t1\t2\t{a}\t{b}\n"),
    "sst2": ("sentence\tlabel\n", "{a}\t{y}\n"),
    "cola": ("", "src\t{y}\t*\t{a}\n"),
    "qnli": ("index\tquestion\tsentence\tlabel\n", "0\t{a}\t{b}\t{word}\n"),
    "rte": ("index\tsentence1\tsentence2\tlabel\n", "0\t{a}\t{b}\t{word}\n"),
    "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n", "0\t1\t2\t{a}\t{b}\t{y}\n"),
    "stsb": ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
             "\tscore\n", "0\tg\tf\t2012\t0\ts\ts\t{a}\t{b}\t{score}\n"),
    "mnli": ("index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tgold_label\n",
             "0\t1\t2\tg\t{a}\t{b}\t{nli}\n"),
}
METRICS = {"mrpc": ("accuracy", "f1"), "qqp": ("accuracy", "f1"), "cola": ("matthews", "accuracy"),
           "stsb": ("pearson", "spearman")}


@pytest.mark.parametrize("task", sorted(GLUE))
def test_glue_layouts(tmp_path, task):
    header, line = GLUE[task]
    rows = []
    for i in range(12):
        y = i % 2
        rows.append(line.format(
            y=y, a=f'he said "good" {i}', b="it's fine", score=i / 4,
            word=["entailment", "not_entailment"][y],
            nli=["entailment", "neutral", "contradiction"][i % 3],
        ))
    for name in ("train.tsv", "dev_matched.tsv" if task == "mnli" else "dev.tsv"):
        (tmp_path / name).write_text(header + "".join(rows))
    data = load_labelled(DataConfig(task=task), ClassifierConfig(data_dir=str(tmp_path)))
    assert data.size("train") == 12 and data.size("validation") == 12
    assert data.metrics == METRICS.get(task, ("accuracy",))
    assert data.texts["train"][0][0] == 'he said "good" 0'  # quotes kept: GLUE TSV has no quoting
    expected_classes = {"stsb": 1, "mnli": 3}.get(task, 2)
    assert data.label_map.num_labels == expected_classes


@pytest.mark.parametrize("name, text", [
    ("blank.csv", "review,y\ngood,pos\nfine,\nbad,neg\n"),
    ("ints.csv", "review,y\ngood,1\nfine,\nbad,0\n"),
    ("null.jsonl", '{"review": "good", "y": 1}\n{"review": "fine", "y": null}\n'
                   '{"review": "bad", "y": 0}\n'),
])
def test_a_row_without_a_label_is_named_not_made_a_class(tmp_path, name, text):
    from cpuft.errors import CpuftError

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CpuftError, match=r"row 2 has no label in column 'y'"):
        load_labelled(DataConfig(train_file=str(path)),
                      ClassifierConfig(text_columns=["review"], label_column="y"))


@pytest.mark.parametrize(("header", "guessed"), [
    (["id", "sentence1", "label", "sentence2"], ("sentence1", "sentence2")),
    (["idx", "text", "label"], ("text",)),
    (["question", "label", "passage"], ("question", "passage")),  # run_glue: the first two
    (["review", "label"], ("review",)),
])
def test_text_columns_are_guessed_as_run_glue_guesses_and_said(tmp_path, caplog, header,
                                                               guessed):
    import logging

    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({h: (lab if h == "label" else f"{t} {h}")
                                        for h in header}) + "\n" for t, lab in ROWS))
    with caplog.at_level(logging.INFO, logger="cpuft"):
        data = load_labelled(DataConfig(train_file=str(path), validation_split=0.25),
                             ClassifierConfig())
    # each row's texts are the guessed columns', in their order
    assert all(len(row) == len(guessed) and all(t.endswith(f" {c}") for t, c in
                                                 zip(row, guessed, strict=True))
               for row in data.texts["train"])
    assert f"--text-columns not given: taking {', '.join(guessed)}" in caplog.text


def test_a_table_of_labels_alone_names_the_flag(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"label": lab}) + "\n" for _, lab in ROWS))
    with pytest.raises(Exception, match="no column but the label 'label': give --text-columns"):
        load_labelled(DataConfig(train_file=str(path), validation_split=0.25),
                      ClassifierConfig())
