"""cpuft bench --script: the exact command of each configuration, and the report's figures."""

from __future__ import annotations

import pytest

from cpuft.bench.script import (
    HOOK_DIR,
    Machine,
    ScriptBench,
    check,
    first_error,
    script_command,
    summarise,
)
from cpuft.bench.script_report import plan_lines, script_markdown, script_verdicts
from cpuft.errors import CpuftError

MACHINE = Machine(cores=8, preload={"LD_PRELOAD": "/lib/libtcmalloc.so.4"})
ENVIRON = {"PATH": "/bin", "PYTHONPATH": "/mine", "SECRET_TOKEN": "s3cret"}


def command(config: str, nproc: int = 1):
    bench = ScriptBench(script="train.py", args=("--epochs", "3"), nproc=nproc,
                        warmup_steps=4, steps=10)
    return script_command(bench, config, "/out", MACHINE, dict(ENVIRON), python="/py",
                          port=29611)


def test_each_configuration_runs_the_script_as_it_is_with_its_own_environment():
    plain, env = command("plain")
    assert plain == ["/py", "train.py", "--epochs", "3"]
    assert env == {**ENVIRON, "PYTHONPATH": f"{HOOK_DIR}:/mine", "CPUFT_BENCH_STEPS": "4,10",
                   "CPUFT_BENCH_OUT": "/out", "CPUFT_OPTIMIZE": "0"}
    stock, stock_env = command("stock-flags")
    assert stock == plain
    assert stock_env == {**env, "OMP_NUM_THREADS": "8", "LD_PRELOAD": "/lib/libtcmalloc.so.4"}
    launched, launch_env = command("cpuft-launch")
    assert launched == ["/py", "-m", "cpuft", "launch", "--nproc-per-node=1",
                        "--master-port=29611", "train.py", "--epochs", "3"]
    assert launch_env == env
    cpuft, cpuft_env = command("cpuft")
    assert cpuft == launched and cpuft_env == {**env, "CPUFT_OPTIMIZE": "1"}
    for argv, _ in (command(c) for c in ("plain", "stock-flags", "cpuft-launch", "cpuft")):
        assert "s3cret" not in " ".join(argv)  # values travel in the environment, never argv


def test_several_processes_start_with_torchrun_or_cpuft_launch():
    argv, _ = command("plain", nproc=2)
    assert argv == ["/py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                    "train.py", "--epochs", "3"]
    _, env = command("stock-flags", nproc=2)
    assert env["OMP_NUM_THREADS"] == "4"
    argv, _ = command("cpuft", nproc=2)
    assert argv[:5] == ["/py", "-m", "cpuft", "launch", "--nproc-per-node=2"]


@pytest.mark.parametrize("bench, message", [
    (ScriptBench(script="nosuch.py"), "--script nosuch.py: no such .py file"),
    (ScriptBench(script=__file__, configs=("plain", "trainer-best")),
     "--configs: trainer-best do not run a script"),
    (ScriptBench(script=__file__, steps=1), "--steps at least 2"),
])
def test_what_cannot_run_is_refused(bench, message):
    with pytest.raises(CpuftError, match=message):
        check(bench)


def record(seconds: float, plan=None):
    return {"step_seconds": [seconds] * 3, "threads": 2, "ld_preload": "", "warmup_seconds": 1.0,
            "plan": plan}


def test_ratios_are_taken_within_each_round_and_their_median_reported():
    bench = ScriptBench(script="train.py", configs=("plain", "cpuft"), rounds=3)
    plan = {"precision": "fp32", "precision_reason": "auto: 21 weights", "fast_dropout": False,
            "fast_dropout_reason": "the model has no nn.Dropout layer with p > 0"}
    runs = {"plain": [record(0.10), record(0.20), record(0.12)],
            "cpuft": [record(0.05), record(0.25), record(0.10), ]}
    runs["cpuft"][0]["plan"] = plan
    report = summarise(bench, runs)
    assert report["configs"]["plain"]["step_seconds"] == pytest.approx(0.12)
    assert report["ratios"]["cpuft"]["rounds"] == pytest.approx([2.0, 0.8, 1.2])
    assert report["ratios"]["cpuft"]["median"] == pytest.approx(1.2)
    assert "plan" not in report["configs"]["plain"]
    lines = script_verdicts(report)
    # one round slower, two faster: the bench cannot tell them apart, and says so
    assert lines[0] == ("cpuft: 1.20x plain, but its rounds ran 0.80-2.00x: no difference this "
                        "bench can tell")
    # the plan of the run of median speed (round 3's) is the one reported
    assert report["configs"]["cpuft"].get("plan") is None
    runs["cpuft"][2]["plan"] = plan
    lines = script_verdicts(summarise(bench, runs))
    assert "cpuft.optimize precision: fp32 (auto: 21 weights)" in lines
    assert ("cpuft.optimize fast dropout: off (the model has no nn.Dropout layer with p > 0)"
            in lines)
    assert "| cpuft |" in script_markdown(summarise(bench, runs))


def test_a_slower_configuration_is_called_slower():
    bench = ScriptBench(script="train.py", configs=("plain", "cpuft"))
    report = summarise(bench, {"plain": [record(0.1)], "cpuft": [record(0.2)]})
    assert script_verdicts(report)[0] == "cpuft: 0.50x, SLOWER than plain"


def test_a_script_without_cpuft_optimize_is_told_how_to_add_it():
    assert "never called cpuft.optimize" in plan_lines(None)[0]


def test_the_line_that_names_the_error_is_quoted():
    output = ("usage: train.py [-h]\ntrain.py: error: unrecognized arguments: --x\n"
              "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
              "===========\n")
    assert first_error(output) == "train.py: error: unrecognized arguments: --x"
    assert first_error("Traceback\nValueError: bad shape\n") == "ValueError: bad shape"
    assert first_error("just\nlast\n") == "last"
    assert first_error("") == "no output"
