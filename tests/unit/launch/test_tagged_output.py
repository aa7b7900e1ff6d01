import os

import pytest

from cpuft.launch import tagged_output
from cpuft.launch.tagged_output import LINE_ATOMIC, relay


@pytest.fixture
def relayed(monkeypatch):
    """What the relay writes for the given writes, one entry per write it makes."""
    def run(*writes: bytes) -> list[bytes]:
        calls: list[bytes] = []
        monkeypatch.setattr(tagged_output, "_write_all", lambda fd, data: calls.append(data))
        src_r, src_w = os.pipe()
        for w in writes:
            os.write(src_w, w)
        os.close(src_w)
        try:
            relay(b"[h:1] ", source=src_r, sink=99)
        finally:
            os.close(src_r)
        return calls
    return run


def test_lines_in_pieces_come_out_whole_and_tagged(relayed):
    out = b"".join(relayed(b"one, ", b"still one\ntwo\nthr", b"ee\nno newline"))
    assert out == b"[h:1] one, still one\n[h:1] two\n[h:1] three\n[h:1] no newline\n"


def test_no_write_cuts_a_line_or_passes_the_atomic_size(relayed):
    lines = [f"line {i} ".encode() * (i % 40 + 1) + b"\n" for i in range(150)]  # < a pipe
    calls = relayed(*lines)
    assert all(c.endswith(b"\n") and len(c) <= LINE_ATOMIC for c in calls)
    assert b"".join(calls) == b"".join(b"[h:1] " + line for line in lines)


def test_the_tag_with_its_host_name_never_enters_the_relays_argv(monkeypatch):
    started = {}

    def popen(args, **kwargs):
        started.update(args=args, env=kwargs["env"])

    monkeypatch.setattr(tagged_output.subprocess, "Popen", popen)
    saved = os.dup(1), os.dup(2)
    try:
        tagged_output.tag_output("[secret-host:3] ")
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    assert not any("secret-host" in a for a in started["args"])
    assert started["env"][tagged_output.TAG_ENV] == "[secret-host:3] "


def test_a_line_redrawn_after_carriage_returns_keeps_its_tag_each_time(relayed):
    """tqdm and Trainer's progress redraw a line after \\r: each drawing starts with the tag,
    so that what a terminal shows last still names its rank; \\r\\n stays a line ending."""
    out = b"".join(relayed(b"\r  0%|\r 50%|\r100%|\n", b"windows line\r\n"))
    assert out == (b"[h:1] \r[h:1]   0%|\r[h:1]  50%|\r[h:1] 100%|\n"
                   b"[h:1] windows line\r\n")
