"""Data for causal-LM fine-tuning: documents, prompt/response pairs or chats, tokenised with the
tokens that count in the loss marked.

Four inputs are read:
- a text file: one document a line, or documents separated by blank lines where there are any;
- JSONL with ``text``: every token counts;
- JSONL with ``prompt`` and ``response``: only the response's tokens (and the end-of-text that
  closes it) count;
- JSONL with chat ``messages``, rendered with the model's chat template: only the assistant
  turns count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from cpuft.data.batching import Collator
from cpuft.data.prepare import Encoded
from cpuft.errors import CpuftError

IGNORE = -100
"""The label of a token that does not count in the loss (torch's cross-entropy ignore_index)."""
Kind = Literal["text", "prompt_response", "chat"]


@dataclass(frozen=True, slots=True)
class LmRows:
    kind: Kind
    rows: list[Any]
    """Strings (text), (prompt, response) pairs, or lists of message dicts (chat)."""


def read_lm_file(path: str | Path) -> LmRows:
    p = Path(path)
    if not p.is_file():
        raise CpuftError(f"{p}: no such file")
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the data
    except (OSError, UnicodeDecodeError) as e:
        raise CpuftError(f"{p}: cannot read it ({e})") from None
    if p.suffix.lower() in (".txt", ".text", ".md"):
        blocks = [b.strip() for b in text.split("\n\n")] if "\n\n" in text.strip() else \
            [line.strip() for line in text.splitlines()]
        docs = [b for b in blocks if b]
        if not docs:
            raise CpuftError(f"{p}: the file holds no text")
        return LmRows("text", docs)
    if p.suffix.lower() not in (".jsonl", ".json"):
        raise CpuftError(f"{p}: use a .txt file of documents or a .jsonl file of records")
    return _read_jsonl(p, text)


def _read_jsonl(p: Path, text: str) -> LmRows:
    kind: Kind | None = None
    rows: list[Any] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise CpuftError(f"{p} line {lineno}: not a JSON object") from None
        if not isinstance(record, dict):
            raise CpuftError(f"{p} line {lineno}: not a JSON object")
        this, row = _row(record, p, lineno)
        if kind is not None and this != kind:
            raise CpuftError(f"{p} line {lineno}: a {this.replace('_', '/')} record among "
                             f"{kind.replace('_', '/')} records: use one kind a file")
        kind = this
        rows.append(row)
    if kind is None:
        raise CpuftError(f"{p}: the file holds no records")
    return LmRows(kind, rows)


def _row(record: dict[str, Any], p: Path, lineno: int) -> tuple[Kind, Any]:
    if isinstance(record.get("messages"), list):
        messages = record["messages"]
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                   and isinstance(m.get("content"), str) for m in messages):
            raise CpuftError(f"{p} line {lineno}: each message needs a 'role' and a 'content'")
        if not any(m["role"] == "assistant" for m in messages):
            raise CpuftError(f"{p} line {lineno}: the messages have no assistant turn to learn")
        return "chat", messages
    if "prompt" in record or "response" in record:
        wrong = [k for k in ("prompt", "response") if not isinstance(record.get(k), str)]
        if wrong:
            what = ", ".join(f"{k} is {type(record.get(k)).__name__}" if k in record
                             else f"no {k}" for k in wrong)
            raise CpuftError(f"{p} line {lineno}: 'prompt' and 'response' must both be "
                             f"strings ({what})")
        return "prompt_response", (record["prompt"], record["response"])
    if isinstance(record.get("text"), str):
        return "text", record["text"]
    raise CpuftError(f"{p} line {lineno}: expected 'text', or 'prompt' and 'response', or "
                     f"'messages' (it has {', '.join(map(repr, record)) or 'no keys'})")


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _with_bos(tokenizer: Any, ids: list[int]) -> list[int]:
    bos = getattr(tokenizer, "bos_token_id", None)
    return [bos, *ids] if bos is not None and getattr(tokenizer, "add_bos_token", False) else ids


def encode_lm(data: LmRows, tokenizer: Any, max_length: int) -> Encoded:
    """Token ids and, per token, its label: the token itself where it counts, else IGNORE.
    Sequences are cut to ``max_length`` tokens."""
    eos = tokenizer.eos_token_id
    ids_out, labels_out = [], []
    for row in data.rows:
        if data.kind == "text":
            ids = [*_with_bos(tokenizer, _ids(tokenizer, row)), eos]
            labels = list(ids)
        elif data.kind == "prompt_response":
            prompt = _with_bos(tokenizer, _ids(tokenizer, row[0]))
            response = [*_ids(tokenizer, row[1]), eos]
            ids, labels = prompt + response, [IGNORE] * len(prompt) + response
        else:
            ids, labels = _chat(tokenizer, row)
        ids_out.append(ids[:max_length])
        labels_out.append(labels[:max_length])
    return Encoded(input_ids=ids_out, labels=labels_out)


def counted(labels: list[int]) -> int:
    """How many tokens of a sequence the loss predicts and counts: the first token has no
    prediction."""
    return sum(1 for label in labels[1:] if label != IGNORE)


def first_counted(labels: list[int]) -> int:
    """The length a sequence must keep for the loss to count a token of it (0: never)."""
    return next((i + 1 for i, label in enumerate(labels) if i > 0 and label != IGNORE), 0)


def learnable(data: LmRows, encoded: Encoded) -> tuple[LmRows, Encoded]:
    """The records, and their encoding, that keep a token to learn within their length."""
    kept = [i for i, labels in enumerate(encoded.labels) if counted(labels)]
    return (LmRows(data.kind, [data.rows[i] for i in kept]),
            Encoded([encoded.input_ids[i] for i in kept], [encoded.labels[i] for i in kept]))


def _chat(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """The rendered chat's ids; labels on the assistant turns' own tokens (their header, which
    the template writes, does not count: it is given, not generated)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise CpuftError("the tokenizer has no chat template: 'messages' data needs one")

    def render(upto: int, prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(messages[:upto], tokenize=False,
                                             add_generation_prompt=prompt)
        return _ids(tokenizer, text)

    ids = render(len(messages), False)
    labels = [IGNORE] * len(ids)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start, end = len(render(i, True)), len(render(i + 1, False))
        if ids[:end] != render(i + 1, False):
            raise CpuftError("the chat template renders a conversation's turns differently "
                             "alone and together: cannot tell which tokens are the assistant's")
        labels[start:end] = ids[start:end]
    return ids, labels


class LmCollator(Collator):
    """Pads ids with the pad token and labels with IGNORE, so padding never counts."""

    def __call__(self, data: Encoded, indices: list[int]) -> dict[str, torch.Tensor]:
        batch = Collator.__call__(self, Encoded([data.input_ids[i] for i in indices],
                                                [0] * len(indices)), list(range(len(indices))))
        width = batch["input_ids"].shape[1]
        labels = torch.full((len(indices), width), IGNORE, dtype=torch.long)
        for r, i in enumerate(indices):
            row = data.labels[i][:width]
            labels[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        batch["labels"] = labels
        return batch
