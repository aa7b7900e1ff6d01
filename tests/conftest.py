"""Fixtures: a tiny random-init BERT with its own tokenizer, an offline hub, and the messages
cpuft logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def said() -> Iterator[list[str]]:
    """The messages cpuft logs during the test, in order."""
    from cpuft.log import NAME, get_logger

    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    get_logger(NAME)  # cpuft's own handler first, as in a run
    handler = Collect()
    logging.getLogger(NAME).addHandler(handler)
    yield lines
    logging.getLogger(NAME).removeHandler(handler)
