"""The reductions ``summary.json`` is built from, across 2 ranks on gloo."""

import json

import pytest

from tests.helpers import run_two_ranks

pytestmark = pytest.mark.multiprocess

RANK = """
import json, os
from cpuft.distributed.group import init_distributed, shutdown
ctx = init_distributed("gloo", timeout_s=60)
rank = ctx.info.rank
out = {"sum": ctx.all_reduce_sum([rank + 1.0, 0.5]),
       "max": ctx.all_reduce_max([10.0 * rank, 5.0 - rank]),
       "everywhere": ctx.on_every_rank(rank == 0)}
print(json.dumps(out))
shutdown(ctx)
"""


def test_sums_and_maxima_reach_every_rank(tmp_path):
    for line in run_two_ranks(RANK, tmp_path):
        got = json.loads(line)
        assert got["sum"] == [3.0, 1.0]
        # summary.json takes the slowest rank's time: the larger of each value
        assert got["max"] == [10.0, 5.0]
        assert got["everywhere"] is False
