"""What the CPU has: logical CPUs, cores, sockets, NUMA nodes and ISA flags.

Parsed from text (``lscpu --parse``, ``/proc/cpuinfo``, sysfs) so that tests can feed fixed
machines. This package never imports torch.
"""

from cpuft.topology.cpu import Isa, LogicalCpu, Topology, parse_cpuinfo, parse_lscpu
from cpuft.topology.read import read_topology

__all__ = ["Isa", "LogicalCpu", "Topology", "parse_cpuinfo", "parse_lscpu", "read_topology"]
