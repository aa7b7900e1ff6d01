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


@pytest.mark.parametrize("values", [[0, 1, "pos"], ["0", "1", "neg", "pos"], [1, "x"]])
def test_labels_that_mix_numbers_and_words_are_refused(values):
    with pytest.raises(CpuftError, match=r"the labels mix numbers \(.*\) and words \(.*\)"):
        LabelMap.infer(values)


def test_ids_given_as_numbers_and_as_text_are_the_same_ids():
    m = LabelMap.infer([1, "2", 2])
    assert m.labels == ("1", "2") and m.encode([2, "1"], "x") == [1, 0]


def test_one_class_names_where():
    with pytest.raises(CpuftError, match=r"the training split .* has one class"):
        LabelMap.infer(["pos"], where="the training split (after holding out the validation "
                                          "rows)")
