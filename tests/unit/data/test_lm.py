"""Causal-LM data: each format read, and exactly the tokens that count in the loss marked."""

import pytest

from cpuft.data.lm import IGNORE, LmCollator, LmRows, encode_lm, read_lm_file
from cpuft.errors import CpuftError
from tests.helpers import make_tiny_llama, write_jsonl


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(make_tiny_llama(tmp_path_factory.mktemp("llama")))


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_text_files_are_lines_or_blank_line_separated_documents(tmp_path):
    (tmp_path / "lines.txt").write_text("good fun\n\nbad dull\n")
    assert read_lm_file(tmp_path / "lines.txt") == LmRows("text", ["good fun", "bad dull"])
    (tmp_path / "docs.txt").write_text("good fun\nreally\n\nbad dull\n")
    assert read_lm_file(tmp_path / "docs.txt").rows == ["good fun\nreally", "bad dull"]
    (tmp_path / "one.txt").write_text("good fun\nbad dull\n")
    assert read_lm_file(tmp_path / "one.txt").rows == ["good fun", "bad dull"]


def test_text_counts_every_token_and_the_end(tokenizer):
    enc = encode_lm(LmRows("text", ["good fun"]), tokenizer, 64)
    expected = [*ids(tokenizer, "good fun"), tokenizer.eos_token_id]
    assert enc.input_ids == [expected] and enc.labels == [expected]


def test_prompt_response_counts_the_response_and_its_end_only(tokenizer, tmp_path):
    path = write_jsonl(tmp_path / "pr.jsonl", [{"prompt": "review: good fun verdict:",
                                                 "response": " fresh"}])
    rows = read_lm_file(path)
    assert rows.kind == "prompt_response"
    enc = encode_lm(rows, tokenizer, 64)
    prompt = ids(tokenizer, "review: good fun verdict:")
    response = [*ids(tokenizer, " fresh"), tokenizer.eos_token_id]
    assert enc.input_ids == [prompt + response]
    assert enc.labels == [[IGNORE] * len(prompt) + response]


def test_chat_counts_the_assistant_turns_only(tokenizer, tmp_path):
    messages = [{"role": "system", "content": "is it"},
                {"role": "user", "content": "good fun ?"},
                {"role": "assistant", "content": "fresh"},
                {"role": "user", "content": "bad ?"},
                {"role": "assistant", "content": "rotten ."}]
    rows = read_lm_file(write_jsonl(tmp_path / "chat.jsonl", [{"messages": messages}]))
    enc = encode_lm(rows, tokenizer, 128)
    counted = [t for t, label in zip(enc.input_ids[0], enc.labels[0], strict=True)
               if label != IGNORE]
    end = tokenizer.eos_token_id
    assert counted == [*ids(tokenizer, "fresh"), end, *ids(tokenizer, "\n"),
                       *ids(tokenizer, "rotten ."), end, *ids(tokenizer, "\n")]
    assert all(label in (IGNORE, t) for t, label in zip(enc.input_ids[0], enc.labels[0],
                                                        strict=True))


def test_padding_never_counts(tokenizer):
    enc = encode_lm(LmRows("text", ["good", "good fun really"]), tokenizer, 64)
    batch = LmCollator(pad_id=tokenizer.pad_token_id)(enc, [0, 1])
    assert batch["input_ids"].shape == batch["labels"].shape == (2, 4)
    assert batch["labels"][0].tolist()[2:] == [IGNORE, IGNORE]
    assert batch["attention_mask"][0].tolist() == [1, 1, 0, 0]


@pytest.mark.parametrize(("records", "message"), [
    ([{"title": "x"}], "expected 'text', or 'prompt' and 'response', or 'messages'"),
    ([{"messages": [{"role": "user", "content": "hi"}]}], "no assistant turn"),
    ([{"text": "a"}, {"prompt": "b", "response": "c"}], "one kind a file"),
    ([{"messages": [{"role": "user"}]}], "needs a 'role' and a 'content'"),
])
def test_bad_records_are_named_by_line(tmp_path, records, message):
    with pytest.raises(CpuftError, match=message):
        read_lm_file(write_jsonl(tmp_path / "bad.jsonl", records))


def test_a_byte_order_mark_is_not_data_and_wrong_types_are_named(tmp_path):
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"prompt": "review: good", "response": " fresh"}\n')
    assert read_lm_file(bom) == LmRows("prompt_response", [("review: good", " fresh")])
    numbers = write_jsonl(tmp_path / "numbers.jsonl", [{"prompt": 3, "response": " fresh"}])
    with pytest.raises(CpuftError, match=r"line 1: 'prompt' and 'response' must both be "
                                         r"strings \(prompt is int\)"):
        read_lm_file(numbers)
    alone = write_jsonl(tmp_path / "alone.jsonl", [{"prompt": "review: good"}])
    with pytest.raises(CpuftError, match=r"must both be strings \(no response\)"):
        read_lm_file(alone)
