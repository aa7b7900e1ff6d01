import pytest

from cpuft.data.labels import LabelMap
from cpuft.errors import CpuftError


def test_string_labels_sorted_and_encoded():
    m = LabelMap.infer(["rotten", "fresh", "fresh"])
    assert m.labels == ("fresh", "rotten") and m.num_labels == 2
    assert m.encode(["rotten", "fresh"], "train") == [1, 0]
    assert m.id2label() == {0: "fresh", 1: "rotten"}


def test_integer_labels_are_remapped():
    m = LabelMap.infer([-1, 1, 1, -1])
    assert m.encode([1, -1], "x") == [1, 0]
    assert m.encode([1.0], "x") == [1]


def test_float_labels_mean_regression():
    m = LabelMap.infer([0.5, 3.2, 4.0])
    assert m.regression and m.num_labels == 1
    assert m.encode([1, "2.5"], "x") == [1.0, 2.5]


def test_unknown_label_is_named():
    m = LabelMap.infer(["a", "b"])
    with pytest.raises(CpuftError, match=r"row 2 has label 'c'"):
        m.encode(["a", "c"], "validation data")


def test_single_class_rejected():
    with pytest.raises(CpuftError, match="one class"):
        LabelMap.infer(["a", "a"])


def test_round_trip(tmp_path):
    m = LabelMap.infer(["x", "y", "z"])
    m.save(tmp_path / "label_map.json")
    assert LabelMap.load(tmp_path / "label_map.json") == m
