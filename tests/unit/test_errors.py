"""The first line of an error's message, as cpuft quotes it inside its own one-line errors."""

import pytest

from cpuft.errors import first_line


@pytest.mark.parametrize("error, expected", [
    (OSError("no such file\nmore detail"), "no such file"),
    (ValueError("\n\n  indented first line  \nsecond"), "indented first line"),
    (RuntimeError(""), "RuntimeError"),  # splitlines()[0] raised IndexError here
    (KeyError(), "KeyError"),
    ("plain text\nafter", "plain text"),
    ("", ""),
])
def test_the_first_line_with_text_on_it(error, expected):
    assert first_line(error) == expected


def test_the_line_is_cut_at_its_width():
    assert first_line(ValueError("x" * 300)) == "x" * 160
    assert first_line(ValueError("abcdef"), width=3) == "abc"
