"""``cpuft bench --script``: a user's own training script, timed on the same optimizer steps
with and without cpuft.

Each configuration runs the script as it is, in a fresh process (or ``nproc`` of them), with
``script_hook`` first on its PYTHONPATH: the hook times the optimizer steps after a warm-up and
ends the process once they are measured.

- ``plain``: ``python SCRIPT`` (torchrun for several processes), the environment as given;
- ``stock-flags``: the same with the flags every CPU tuning guide starts from: one OpenMP thread
  a physical core and tcmalloc (else jemalloc) preloaded, as torch's own ``run_cpu`` sets them;
- ``cpuft-launch``: ``cpuft launch``: its process set-up (pinned cores, threads, allocator,
  OpenMP settings) alone;
- ``cpuft``: ``cpuft launch``, and the script's own ``cpuft.optimize`` call acts.

In every row but ``cpuft`` the script's ``cpuft.optimize`` is switched off (``CPUFT_OPTIMIZE=0``),
so one script, edited once for cpuft, is its own baseline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpuft.api.optimize import SWITCH
from cpuft.errors import CpuftError
from cpuft.launch.proc import run_output
from cpuft.log import get_logger
from cpuft.speedplan.allocator import allocator_env, choose_allocator
from cpuft.topology import read_topology

LOG = get_logger(__name__)

SCRIPT_CONFIGS = ("plain", "stock-flags", "cpuft-launch", "cpuft")
HOOK_DIR = Path(__file__).resolve().parent / "script_hook"
STEPS_ENV, OUT_ENV = "CPUFT_BENCH_STEPS", "CPUFT_BENCH_OUT"


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptBench:
    """What to run and how long to measure it."""

    script: str
    args: tuple[str, ...] = ()
    configs: tuple[str, ...] = SCRIPT_CONFIGS
    nproc: int = 1
    """Processes on this machine (several: torchrun for the stock rows, as the script's
    authors start it)."""
    warmup_steps: int = 5
    steps: int = 20
    """Optimizer steps measured after the warm-up."""
    rounds: int = 1
    timeout: float = 1800.0
    """Seconds one run may take, start-up and warm-up included."""


@dataclass(frozen=True, slots=True)
class Machine:
    """What the stock flags are made of: physical cores and the allocator's preload."""

    cores: int
    preload: dict[str, str] = field(default_factory=dict)


def check(bench: ScriptBench) -> None:
    """Refuse what cannot run, before minutes are spent."""
    if not bench.script.endswith(".py") or not Path(bench.script).is_file():
        raise CpuftError(f"--script {bench.script}: no such .py file")
    unknown = [c for c in bench.configs if c not in SCRIPT_CONFIGS]
    if unknown:
        raise CpuftError(f"--configs: {', '.join(unknown)} do not run a script: use "
                         f"{', '.join(SCRIPT_CONFIGS)}")
    if not bench.configs:
        raise CpuftError("--configs: give at least one")
    if bench.nproc < 1 or bench.steps < 2 or bench.warmup_steps < 1 or bench.rounds < 1:
        raise CpuftError("--nproc-per-node and --rounds must be at least 1, --steps at least 2 "
                         "and --warmup-steps at least 1")


def script_command(bench: ScriptBench, config: str, out: Path, machine: Machine,
                   environ: dict[str, str], python: str = sys.executable, port: int = 29500,
                   ) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of one configuration's run, its step records going to ``out``; ``port``:
    the rendezvous port of ``cpuft launch``'s runs (torchrun's own are ``--standalone``)."""
    env = dict(environ)
    path = env.get("PYTHONPATH", "")
    env.update({"PYTHONPATH": os.pathsep.join(p for p in (str(HOOK_DIR), path) if p),
                STEPS_ENV: f"{bench.warmup_steps},{bench.steps}", OUT_ENV: str(out),
                SWITCH: "1" if config == "cpuft" else "0"})
    if config in ("cpuft-launch", "cpuft"):
        return [python, "-m", "cpuft", "launch", f"--nproc-per-node={bench.nproc}",
                f"--master-port={port}", bench.script, *bench.args], env
    if config == "stock-flags":
        env.update(machine.preload)
        env["OMP_NUM_THREADS"] = str(max(1, machine.cores // bench.nproc))
    if bench.nproc == 1:
        return [python, bench.script, *bench.args], env
    return [python, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={bench.nproc}", bench.script, *bench.args], env


def this_machine() -> Machine:
    allocator, path, _ = choose_allocator("auto")
    return Machine(read_topology().physical_cores, allocator_env(allocator, path, {}))


def run_once(bench: ScriptBench, config: str, where: Path, machine: Machine) -> dict[str, Any]:
    """One run: rank 0's step record, or a CpuftError that says why there is none (the
    script's output is kept in ``where``.log either way)."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    argv, env = script_command(bench, config, where, machine, dict(os.environ),
                               port=free_port())
    code, out, err = run_output(argv, env, timeout=bench.timeout)
    log = where.with_suffix(".log")
    log.write_text(f"$ {' '.join(argv)}\n{out}{err}")
    record = where / "rank0.json"
    if record.is_file():
        return dict(json.loads(record.read_text()))
    taken = where / "rank0.partial.json"
    if code == 0 and taken.is_file():
        steps = json.loads(taken.read_text())["steps"]
        raise CpuftError(f"{bench.script} ended after {steps} optimizer steps, before the "
                         f"{bench.warmup_steps} warm-up and {bench.steps} measured ones: lower "
                         "--steps or --warmup-steps, or let the script train longer")
    raise CpuftError(f"{config}: {bench.script} " + (
        f"exited with code {code}" if code else "never stepped an optimizer")
        + f" ({first_error(err or out)[:200]}); its output is in {log}")


def free_port() -> int:
    """A loopback port nothing listens on now: two benches, or a bench beside a launched job,
    must not meet at one rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ERROR_LINE = re.compile(r"(^|\s)(\w*Error|error):")


def first_error(output: str) -> str:
    """The line of a failed run's output that names its error (argparse's, an exception's), or
    its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in lines if ERROR_LINE.search(line)),
                lines[-1] if lines else "no output")


def summarise(bench: ScriptBench, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The report: each configuration's median step time over its rounds, and each one's
    speed against the first configuration, as the median of the ratios within a round."""
    configs: dict[str, Any] = {}
    for config, done in runs.items():
        medians = [statistics.median(r["step_seconds"]) for r in done]
        middle = sorted(range(len(done)), key=lambda i: medians[i])[(len(done) - 1) // 2]
        kept = done[middle]
        configs[config] = {
            "step_seconds": statistics.median(medians),
            "steps_per_second": 1 / statistics.median(medians),
            "rounds_step_seconds": medians,
            "threads": kept["threads"],
            "allocator": _allocator(kept["ld_preload"]),
            "warmup_seconds": kept["warmup_seconds"],
            **({"plan": kept["plan"]} if kept.get("plan") else {}),
        }
    base = next(iter(runs))
    ratios = {}
    for config in runs:
        within = [b / c for b, c in zip(configs[base]["rounds_step_seconds"],
                                         configs[config]["rounds_step_seconds"], strict=True)]
        ratios[config] = {"median": statistics.median(within), "rounds": within}
    return {"script": Path(bench.script).name, "args": list(bench.args), "nproc": bench.nproc,
            "warmup_steps": bench.warmup_steps, "steps": bench.steps, "rounds": bench.rounds,
            "cpu": read_topology().model_name, "baseline": base, "configs": configs,
            "ratios": ratios}


def _allocator(preload: str) -> str:
    for name in ("tcmalloc", "jemalloc"):
        if name in preload:
            return name
    return "system"


def run_script_bench(bench: ScriptBench, output_dir: Path) -> dict[str, Any]:
    check(bench)
    machine = this_machine()
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in bench.configs}
    for round_ in range(bench.rounds):
        for config in bench.configs:
            turn = f" (round {round_ + 1}/{bench.rounds})" if bench.rounds > 1 else ""
            LOG.info(f"{config}: {bench.warmup_steps} warm-up and {bench.steps} measured "
                     f"steps of {bench.script}{turn}")
            record = run_once(bench, config, output_dir / "runs" / f"{config}-{round_ + 1}",
                              machine)
            LOG.info(f"    {statistics.median(record['step_seconds']) * 1000:.1f} ms a step, "
                     f"{record['threads']} threads")
            runs[config].append(record)
    return summarise(bench, runs)
