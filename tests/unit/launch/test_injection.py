"""Hostile values in every field that reaches a command line: refused, or passed as one inert
argument; and no environment value in any argv."""

import subprocess

import pytest

from cpuft.errors import CpuftError
from cpuft.launch.commands import (
    LaunchConfig,
    direct_commands,
    mpirun_command,
    remote_command,
    ssh_commands,
)
from cpuft.launch.hostfile import Host, parse_hostfile
from cpuft.launch.request import LaunchRequest, build_launch

HOSTILE = ["-Fevil", "-oProxyCommand=touch pwned", "a;touch pwned", "$(touch pwned)",
           "`touch pwned`", "a b", "a\nb", "'", ""]


@pytest.mark.parametrize("host", HOSTILE)
def test_hostile_hosts_are_refused_in_hostfiles_and_remote_shells(host):
    if "\n" not in host:  # in a hostfile, a newline only starts the next host
        with pytest.raises(CpuftError):
            parse_hostfile(f"{host}\n")
    with pytest.raises(CpuftError, match="is not a host name or an IP address"):
        remote_command("ssh -o BatchMode=yes -- {host} {command}", host, "true")


@pytest.mark.parametrize("addr", ["127.0.0.1;touch /tmp/x;#", "-oProxyCommand=x", "$(id)",
                                  "a b", "10.0.0.1 && true"])
def test_a_hostile_master_address_is_refused(addr):
    with pytest.raises(CpuftError, match=r"--master-addr .* is not a host name or an IP address"):
        build_launch(LaunchRequest(nproc_per_node="1", master_addr=addr), check_network=False)


@pytest.mark.parametrize("good", ["node-1", "n1.cluster.local", "10.0.0.1", "[fe80::1]",
                                  "cpft-h1-1234", "NODE_7"])
def test_host_names_and_addresses_pass(good):
    assert parse_hostfile(f"{good}\n")[0].name == good


def test_every_field_of_a_remote_start_reaches_the_program_inert(tmp_path):
    """The remote shell is a local sh here: what the program receives is exactly what was put
    in, and no command hidden in a value runs."""
    workdir = tmp_path / "w'$(touch pwned)\"`touch pwned`"
    workdir.mkdir()
    program = tmp_path / "p;touch pwned $(touch pwned)"
    program.write_text('#!/bin/sh\nprintf "%s\\n" "$PWD" "$@" "$SECRET_X"\n')
    program.chmod(0o755)
    args = ["--a;touch pwned", "$(touch pwned)", "`touch pwned`", "'", '"', "a b"]
    secret = "s3cret'$(touch pwned)\";touch pwned"
    cfg = LaunchConfig(hosts=[Host("n1")], nproc_per_node=1, launcher="direct",
                       remote_shell="sh -c {command} {host}", workdir=str(workdir),
                       python=str(program), module_args=[], train_args=args,
                       env={"SECRET_X": secret})
    [start] = direct_commands(cfg)
    assert secret not in " ".join(start.argv)
    out = subprocess.run(start.argv, input=start.stdin, capture_output=True, text=True,
                         cwd=tmp_path, check=True).stdout.splitlines()
    assert out == [str(workdir), *args, secret]
    assert not list(tmp_path.rglob("pwned"))


def test_no_environment_value_in_any_launchers_argv():
    secret = "hf_" + "x" * 20
    cfg = LaunchConfig(hosts=[Host("n1"), Host("n2")], nproc_per_node=1, master_addr="10.0.0.1",
                       env={"HF_TOKEN": secret, "TORCH_X": secret, "GLOO_Y": secret})
    starts = ssh_commands(cfg) + direct_commands(cfg)
    assert all(secret not in " ".join(s.argv) and f"export HF_TOKEN={secret}" in s.stdin
               for s in starts)
    for mpi in ("openmpi", "intelmpi"):
        cfg.mpi = mpi
        argv, env = mpirun_command(cfg)
        assert secret not in " ".join(argv) and env["HF_TOKEN"] == secret
