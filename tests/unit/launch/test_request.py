"""The launchers' commands, asserted exactly, without starting anything."""

import pytest

from cpuft.errors import CpuftError
from cpuft.launch.commands import (
    LaunchConfig,
    local_command,
    mpirun_command,
    remote_command,
    ssh_commands,
    torchrun_args,
)
from cpuft.launch.hostfile import Host

PY = "/venv/bin/python"


def config(**kw):
    base = dict(hosts=[Host("n1"), Host("n2")], nproc_per_node=2, master_addr="10.0.0.1",
                master_port=29400, python=PY, workdir="/work/job", train_args=["--max-steps", "5"],
                env={"OMP_NUM_THREADS": "16"})
    base.update(kw)
    return LaunchConfig(**base)


def test_torchrun_for_first_and_second_node():
    cfg = config(host_addr={"n1": "10.0.0.1", "n2": "10.0.0.2"}, max_restarts=2)
    assert torchrun_args(cfg, 1) == [
        PY, "-m", "cpuft.distributed.agent", "--nnodes=2", "--nproc-per-node=2",
        "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29400", "--rdzv-id=cpuft",
        "--rdzv-conf=is_host=false", "--max-restarts=2", "--monitor-interval=1",
        "--local-addr=10.0.0.2", "-m", "cpuft", "train", "--max-steps", "5",
    ]
    assert "--rdzv-conf=is_host=true" in torchrun_args(cfg, 0)


def test_local_command():
    argv, env = local_command(config(hosts=[Host("localhost")], master_addr="127.0.0.1"))
    assert argv[:3] == [PY, "-m", "cpuft.distributed.agent"] and "--nnodes=1" in argv
    assert env == {"OMP_NUM_THREADS": "16", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}
    with pytest.raises(CpuftError, match="one host"):
        local_command(config())


def test_ssh_commands_default_and_netns_shells():
    cfg = config(host_env={"n2": {"GLOO_SOCKET_IFNAME": "eth1"}})
    first, second = ssh_commands(cfg)
    assert (first.host, second.host) == ("n1", "n2")
    # "--" ends ssh's options before the host; the environment travels on standard input
    assert second.argv[:5] == ["ssh", "-o", "BatchMode=yes", "--", "n2"]
    assert len(second.argv) == 6
    assert second.argv[5].startswith(
        'eval "$(cat)" && cd /work/job && exec /venv/bin/python -m cpuft.distributed.agent '
        "--nnodes=2")
    assert second.stdin == ("export GLOO_SOCKET_IFNAME=eth1\nexport MASTER_ADDR=10.0.0.1\n"
                            "export MASTER_PORT=29400\nexport OMP_NUM_THREADS=16\n")
    assert "GLOO_SOCKET_IFNAME" not in first.stdin + first.argv[5]
    ns1, _ = ssh_commands(config(remote_shell="ip netns exec {host}"))
    assert ns1.argv[:6] == ["ip", "netns", "exec", "n1", "sh", "-c"]
    assert ns1.argv[6].endswith("-m cpuft train --max-steps 5")


def test_remote_command_quotes_the_script_once():
    assert remote_command("ssh {host} {command}", "a", "echo 'x y'") == ["ssh", "a", "echo 'x y'"]


def test_openmpi_and_intelmpi():
    argv, env = mpirun_command(config(run_as_root=True))
    assert argv == [
        "mpirun", "-np", "4", "-H", "n1:2,n2:2", "--map-by", "ppr:2:node", "--bind-to", "none",
        "--wdir", "/work/job", "--allow-run-as-root", "-x", "MASTER_ADDR", "-x", "MASTER_PORT",
        "-x", "OMP_NUM_THREADS", PY, "-m", "cpuft", "train", "--max-steps", "5",
    ]
    assert env["MASTER_ADDR"] == "10.0.0.1"
    argv, env = mpirun_command(config(mpi="intelmpi"))
    assert argv[:7] == ["mpirun", "-n", "4", "-ppn", "2", "-hosts", "n1,n2"]
    # names in the argv, values in mpirun's environment
    assert argv[9:11] == ["-genvlist", "MASTER_ADDR,MASTER_PORT,OMP_NUM_THREADS"]
    assert "10.0.0.1" not in argv and env["MASTER_ADDR"] == "10.0.0.1"


def test_direct_commands_set_each_rank():
    from cpuft.launch.commands import direct_commands

    cfg = config(remote_shell="ip netns exec {host}",
                 module_args=["-m", "cpuft.distributed.allreduce_probe"],
                 train_args=[])
    first, second = direct_commands(cfg)
    assert "export RANK=1\n" in second.stdin and "export WORLD_SIZE=2\n" in second.stdin
    assert second.argv[6].endswith("/venv/bin/python -m cpuft.distributed.allreduce_probe")
    assert "export RANK=0\n" in first.stdin


def launch_args(tmp_path, **kw):
    from cpuft.launch.request import LaunchRequest

    return LaunchRequest(**{"nproc_per_node": "1", "master_port": 29400, **kw})


def test_comm_cores_reach_every_rank_env(tmp_path, monkeypatch, capsys):
    from cpuft.launch import request as launch_request
    from cpuft.topology import Isa, Topology, parse_lscpu

    four = Topology(cpus=tuple(parse_lscpu("".join(f"{c},{c},0,0\n" for c in range(4)))),
                    isa=Isa())
    monkeypatch.setattr(launch_request, "read_topology", lambda: four)
    hosts = tmp_path / "hosts"
    hosts.write_text("n1\nn2\n")
    cfg = launch_request.build_launch(launch_args(tmp_path, nproc_per_node="2",
                                                  hostfile=str(hosts), comm_cores=1),
                                      check_network=False)
    assert cfg.env["CPUFT_RANK_CORES"] == "0;2" and cfg.env["CPUFT_COMM_CORES"] == "1;3"
    assert cfg.env["OMP_NUM_THREADS"] == "1"
    assert "idle" not in capsys.readouterr().err
    # one process never communicates: its comm cores would sit idle, and it says so
    launch_request.build_launch(launch_args(tmp_path, comm_cores=1), check_network=False)
    assert "--comm-cores 1 with one process" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (dict(master_port=70000), "--master-port 70000: a port is 1 to 65535"),
    (dict(comm_cores=-1), "--comm-cores must be 0 or more"),
    (dict(max_restarts=-1), "--max-restarts must be 0 or more"),
])
def test_bad_launch_numbers_are_refused(tmp_path, flags, message):
    from cpuft.launch.request import build_launch

    with pytest.raises(CpuftError, match=message):
        build_launch(launch_args(tmp_path, **flags), check_network=False)


def test_a_users_script_runs_through_the_rank_runner(tmp_path, monkeypatch):
    from cpuft.launch.program import rank_program
    from cpuft.launch.request import LaunchRequest, build_launch

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text("")
    for command in (["--", "python", "job.py", "--lr", "3"], ["job.py", "--lr", "3"],
                    ["--", "/usr/bin/python3", "job.py", "--lr", "3"]):
        rank = rank_program(command)
        assert (rank.program, rank.args, rank.is_train) == (
            ("-m", "cpuft.distributed.script", "job.py"), ("--lr", "3"), False)
    module = rank_program(["--", "python", "-m", "my.train", "x"])
    assert module.program == ("-m", "cpuft.distributed.script", "-m", "my.train")
    train = rank_program(["--", "train", "--max-steps", "5"])
    assert train.program == ("-m", "cpuft", "train") and train.is_train

    rank = rank_program(["job.py", "--lr", "3"])
    cfg = build_launch(LaunchRequest(nproc_per_node="2", program=rank.program,
                                     train_args=list(rank.args)), check_network=False)
    assert torchrun_args(cfg, 0)[-5:] == ["-m", "cpuft.distributed.script", "job.py", "--lr",
                                          "3"]
    argv, _ = mpirun_command(cfg)
    assert argv[-5:] == ["-m", "cpuft.distributed.script", "job.py", "--lr", "3"]


def test_the_agents_failure_lines_name_the_rank_to_the_launcher():
    from types import SimpleNamespace

    from cpuft.distributed.agent import failure_lines
    from cpuft.launch.run import FAILED_RANK

    lines = failure_lines({3: SimpleNamespace(local_rank=1, exitcode=2),
                           2: SimpleNamespace(local_rank=0, exitcode=-9)})
    assert [FAILED_RANK.match(line).groups() for line in lines] == [("2", "-9"), ("3", "2")]
