"""`cpuft cluster check` on namespaced hosts: all good, a host without its link, a host whose
packages differ."""

import json
import subprocess
import sys

import pytest

from cpuft.testing.netns import NETNS_ETC, can_make_namespaces, namespace_cluster
from tests.helpers import cpuft_env

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(not can_make_namespaces(), reason="needs root and iproute2 (CI has both)"),
]


def check(hostfile, remote_shell, cwd):
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "cluster", "check", "--hostfile", str(hostfile),
         "--remote-shell", remote_shell, "--json"],
        capture_output=True, text=True, env=cpuft_env(), timeout=300, cwd=cwd,
    )
    return proc, json.loads(proc.stdout.strip().splitlines()[-1])


def by(rep, host, name):
    return [f for f in rep["findings"] if f["host"] == host and f["check"] == name]


def test_all_good_then_a_host_down(tmp_path):
    with namespace_cluster(2, subnet=232) as cluster:
        hostfile = tmp_path / "hosts"
        hostfile.write_text("".join(f"{h}\n" for h in cluster.hosts))
        proc, rep = check(hostfile, "ip netns exec {host}", tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert rep["ok"] and rep["master_addr"] == cluster.addrs[cluster.hosts[0]]
        assert rep["allreduce"]["world_size"] == 2
        assert all(row["seconds"] > 0 and row["bus_gb_per_s"] > 0
                   for row in rep["allreduce"]["rows"])
        route = by(rep, cluster.hosts[1], "route")[0]
        assert route["status"] == "ok" and "via eth0" in route["detail"]

        down = cluster.hosts[1]
        subprocess.run(["ip", "netns", "exec", down, "ip", "link", "set", "eth0", "down"],
                       check=True)
        proc, rep = check(hostfile, "ip netns exec {host}", tmp_path)
        assert proc.returncode == 1 and not rep["ok"]
        [failure] = [f for f in rep["findings"] if f["status"] == "fail"]
        assert failure["host"] == down and "no route to the master" in failure["detail"]
        assert rep["allreduce"] is None


def test_a_host_with_other_versions_is_named_with_the_package(tmp_path):
    # The second host sees a different `rich`: a dist-info earlier on its PYTHONPATH.
    fake = tmp_path / "fake-site" / "rich-0.0.1.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: rich\nVersion: 0.0.1\n")
    with namespace_cluster(2, subnet=233) as cluster:
        other = cluster.hosts[1]
        rsh = tmp_path / "rsh"
        rsh.write_text(
            "#!/bin/sh\nhost=$1; shift\n"
            f'if [ "$host" = {other} ]; then export PYTHONPATH={fake.parent}; fi\n'
            'exec ip netns exec "$host" "$@"\n')
        rsh.chmod(0o755)
        hostfile = tmp_path / "hosts"
        hostfile.write_text("".join(f"{h}\n" for h in cluster.hosts))
        proc, rep = check(hostfile, f"{rsh} {{host}}", tmp_path)
    assert proc.returncode == 1
    [versions] = by(rep, other, "versions")
    assert versions["status"] == "fail"
    assert "rich: here 15.0.0, " + other + " 0.0.1" in versions["detail"]
    assert by(rep, cluster.hosts[0], "versions")[0]["status"] == "ok"


def test_sigterm_removes_the_namespaced_hosts():
    script = ("import time\nfrom cpuft.testing.netns import namespace_cluster\n"
              "with namespace_cluster(2, subnet=234) as c:\n"
              "    print(' '.join([c.switch, *c.hosts]), flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cpuft_env())
    names = proc.stdout.readline().split()
    assert len(names) == 3
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert all(n in listed for n in names)
    hosts_file = NETNS_ETC / names[1] / "hosts"
    assert f" {names[2]}\n" in hosts_file.read_text()
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "hosts were removed" in err
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names)
    assert not any((NETNS_ETC / n).exists() for n in names)
