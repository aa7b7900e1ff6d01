import pytest

from cpuft.errors import CpuftError
from cpuft.launch.hostfile import Host, parse_hostfile


def test_three_formats_and_comments():
    text = ("# cluster\nnode1\nnode2 slots=4\nnode3:2   # two ranks\n\n"
            "10.0.0.7 slots=1 max_slots=8\n")
    assert parse_hostfile(text) == [
        Host("node1"), Host("node2", 4), Host("node3", 2), Host("10.0.0.7", 8)
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [("node1 slots=\n", "line 1: cannot parse"), ("a\nb c\n", "line 2: cannot parse"),
     ("a\na\n", "listed twice"), ("# nothing\n", "no hosts"), ("a:0\n", "0 slots")],
)
def test_bad_lines_name_the_line(text, message):
    with pytest.raises(CpuftError, match=message):
        parse_hostfile(text)


def test_route_to_master_from_ip_output():
    from cpuft.launch.netinfo import Route, parse_addrs, route_to

    addrs = ("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
             "7: veth-h2@if8    inet 10.77.0.2/24 scope global veth-h2\\       valid_lft forever\n")
    assert parse_addrs(addrs) == [("veth-h2", "10.77.0.2")]
    route = "10.77.0.1 dev veth-h2 src 10.77.0.2 uid 0 \\    cache \n"
    assert route_to("10.77.0.1", route, addrs) == Route("veth-h2", "10.77.0.2")
    own = "local 10.77.0.2 dev lo table local src 10.77.0.2 uid 0 \\    cache <local> \n"
    assert route_to("10.77.0.2", own, addrs) == Route("veth-h2", "10.77.0.2")
    assert route_to("10.9.9.9", "", addrs) is None
    # a hostfile of 127.0.0.1: every rank on this machine, over loopback
    loop = "local 127.0.0.1 dev lo src 127.0.0.1 uid 0 \\    cache <local> \n"
    assert route_to("127.0.0.1", loop, addrs) == Route("lo", "127.0.0.1")
