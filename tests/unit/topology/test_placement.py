from pathlib import Path

import pytest

from cpuft.errors import CpuftError
from cpuft.topology import Isa, LogicalCpu, Topology, parse_lscpu
from cpuft.topology.placement import (
    auto_nproc,
    cores_for_local_rank,
    cpu_list,
    node_env,
    parse_cpu_list,
    plan_node,
)

FIXTURES = Path(__file__).parents[2] / "fixtures"


def machine(sockets, cores_per_socket, nodes_per_socket=1, smt=2):
    cpus, cpu = [], 0
    total = sockets * cores_per_socket
    for t in range(smt):
        for core in range(total):
            socket = core // cores_per_socket
            node = socket * nodes_per_socket + (core % cores_per_socket) * nodes_per_socket \
                // cores_per_socket
            cpus.append(LogicalCpu(cpu=t * total + core, core=core, socket=socket, node=node))
            cpu += 1
    return Topology(cpus=tuple(cpus), isa=Isa())


def test_one_socket_two_cores():
    topo = Topology(cpus=tuple(parse_lscpu("0,0,0,0\n1,1,0,0\n")), isa=Isa())
    assert auto_nproc(topo) == 1
    [p] = plan_node(topo, 1)
    assert p.cores == (0, 1) and p.threads == 2
    env = node_env([p])
    assert env["OMP_NUM_THREADS"] == "2" and env["GOMP_CPU_AFFINITY"] == "0-1"
    assert env["CPUFT_RANK_CORES"] == "0-1"


def test_two_sockets_64_cores_with_smt_one_rank_per_numa_node():
    topo = machine(sockets=2, cores_per_socket=32)
    assert (topo.physical_cores, len(topo.cpus), auto_nproc(topo)) == (64, 128, 2)
    ranks = plan_node(topo, auto_nproc(topo))
    assert [p.cores for p in ranks] == [tuple(range(0, 32)), tuple(range(32, 64))]
    assert node_env(ranks)["CPUFT_RANK_CORES"] == "0-31;32-63"
    assert "GOMP_CPU_AFFINITY" not in node_env(ranks)  # differs per rank: ranks pin themselves


def test_two_numa_nodes_per_socket_and_comm_cores():
    topo = machine(sockets=2, cores_per_socket=32, nodes_per_socket=2)
    assert auto_nproc(topo) == 4
    ranks = plan_node(topo, 4, comm_cores=1)
    assert [p.cores[0] for p in ranks] == [0, 16, 32, 48]
    assert all(p.threads == 15 and len(p.comm_cores) == 1 for p in ranks)
    assert ranks[1].comm_cores == (31,)
    env = node_env(ranks)
    assert env["OMP_NUM_THREADS"] == "15"
    assert env["CPUFT_RANK_CORES"].split(";")[1] == "16-30"
    assert env["CPUFT_COMM_CORES"] == "15;31;47;63"
    assert cores_for_local_rank(env["CPUFT_COMM_CORES"], 2) == [47]
    assert "CPUFT_COMM_CORES" not in node_env(plan_node(topo, 4))
    with pytest.raises(CpuftError, match="too few to keep 16"):
        plan_node(topo, 4, comm_cores=16)
    with pytest.raises(CpuftError, match="--comm-cores must be 0 or more"):
        plan_node(topo, 4, comm_cores=-1)


def test_fixture_two_socket_text_and_uneven_split():
    topo = Topology(cpus=tuple(parse_lscpu((FIXTURES / "lscpu_2socket_smt.txt").read_text())),
                    isa=Isa())
    assert [p.cores for p in plan_node(topo, 3)] == [(0, 1, 2), (3, 4, 5), (6, 7)]
    with pytest.raises(CpuftError, match="more than the 8 physical cores"):
        plan_node(topo, 9)


def test_cpu_list_round_trip():
    assert cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert cores_for_local_rank("0-3;4-7", 1) == [4, 5, 6, 7]
