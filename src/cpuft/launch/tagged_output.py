"""Every line a rank writes, tagged ``[host:rank]`` and whole.

The ranks of a node share one output (their torchrun agent's, or srun's), and a line written in
two pieces (``print`` with ``PYTHONUNBUFFERED`` writes the text, then the newline) can be cut by
another rank's line. ``tag_output`` sends this process's standard output and error, at the file
descriptor level (so C++ warnings and child processes too), through a small relay process that
writes each complete line with its tag in one ``write``. The relay is a process, not a thread,
so that what a crashing rank wrote last still comes out; it ignores SIGTERM and SIGINT (the
rank's checkpoint messages come after them) and ends when every writer has closed its end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

CHUNK = 65536
LINE_ATOMIC = 4096
"""PIPE_BUF: a write this long or shorter to a pipe is never mixed with another's."""


TAG_ENV = "CPUFT_OUTPUT_TAG"
"""The relay's tag."""

TAGGED_ENV = "CPUFT_OUTPUT_TAGGED"
"""Set once a process tags its output: a re-executed rank (the allocator preload) keeps the
relay it has rather than tagging twice."""


def tag_rank_output(rank: int) -> None:
    """Tag this rank's lines ``[host:rank] ``, the host as the launcher named it."""
    if os.environ.get(TAGGED_ENV):
        return
    host = os.environ.get("CPUFT_HOST") or socket.gethostname()
    tag_output(f"[{host}:{rank}] ")
    os.environ[TAGGED_ENV] = "1"


def tag_output(tag: str) -> None:
    """From now on, this process's (and its children's) stdout and stderr lines reach the
    present stdout whole, each starting with ``tag``."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    # The tag holds the host name: it goes by the environment, never by argv.
    subprocess.Popen([sys.executable, "-m", "cpuft.launch.tagged_output"], stdin=read_end,
                     stdout=1, stderr=2, close_fds=True, env={**os.environ, TAG_ENV: tag})
    os.close(read_end)
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)


def relay(tag: bytes, source: int = 0, sink: int = 1) -> None:
    """Copy ``source`` to ``sink`` line by line, each line tagged and written in one call (one
    call holds several lines while they fit in ``LINE_ATOMIC``); a last line without its
    newline gets one."""
    pending = b""
    while chunk := os.read(source, CHUNK):
        *lines, pending = (pending + chunk).split(b"\n")
        _write_lines(sink, [tagged(tag, line) for line in lines])
    if pending:
        _write_lines(sink, [tagged(tag, pending)])


def tagged(tag: bytes, line: bytes) -> bytes:
    """``line`` with its newline, ``tag`` before it and after each carriage return in it: a
    progress bar (tqdm's, Trainer's) redraws its line after one, over the tag."""
    end = b"\r\n" if line.endswith(b"\r") else b"\n"
    body = line.removesuffix(b"\r")
    return b"\r".join(tag + part for part in body.split(b"\r")) + end


def _write_lines(sink: int, lines: list[bytes]) -> None:
    batch = b""
    for line in lines:
        if batch and len(batch) + len(line) > LINE_ATOMIC:
            _write_all(sink, batch)
            batch = b""
        batch += line
    if batch:
        _write_all(sink, batch)


def _write_all(sink: int, data: bytes) -> None:
    while data:
        data = data[os.write(sink, data):]


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    relay(os.environ[TAG_ENV].encode())


if __name__ == "__main__":
    main()
