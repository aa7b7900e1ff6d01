"""cpuft's messages go through logging under 'cpuft': on standard output by default, from rank 0
alone unless asked, and a program can lower, raise or route them."""

import subprocess
import sys

import pytest

from tests.helpers import cpuft_env

SCRIPT = """
import logging, sys
from cpuft.log import get_logger
if sys.argv[1] == "warnings-only":
    logging.getLogger("cpuft").setLevel(logging.WARNING)
if sys.argv[1] == "routed":
    logging.getLogger("cpuft").addHandler(logging.StreamHandler(sys.stderr))
get_logger("cpuft.job.train").info("fine-tuning")
get_logger("cpuft.job.train").warning("careful")
"""


def run(how: str, **env: str) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, how], capture_output=True, text=True,
                          env=cpuft_env(**env), check=True, timeout=60)
    return proc.stdout, proc.stderr


@pytest.mark.parametrize("how, env, out, err", [
    ("default", {}, "fine-tuning\ncareful\n", ""),
    ("default", {"RANK": "1", "WORLD_SIZE": "2"}, "", ""),
    ("default", {"RANK": "1", "WORLD_SIZE": "2", "CPUFT_LOG_ALL_RANKS": "1"},
     "fine-tuning\ncareful\n", ""),
    ("warnings-only", {}, "careful\n", ""),
    ("routed", {}, "", "fine-tuning\ncareful\n"),  # the program's own handler, not cpuft's
])
def test_messages_where_and_from_whom(how, env, out, err):
    assert run(how, **env) == (out, err)
