"""``cpuft rendezvous``: serve an elastic job's rendezvous store on a stable host."""

from __future__ import annotations

import argparse
from typing import Any

DESCRIPTION = """\
Serve the rendezvous store of an elastic job (--nnodes MIN:MAX) until stopped, on a host that no
spot loss can take: the login host, an on-demand node, a small pod. Every node's launcher joins
it with --rdzv-endpoint HOST:PORT. With a hostfile, cpuft launch starts it itself on the
--rdzv-endpoint host; under Slurm or Kubernetes, run it where the scheduler keeps it alive:

  cpuft rendezvous --listen login1:29400
"""


def register(sub: Any) -> None:
    p = sub.add_parser("rendezvous", help="serve an elastic job's rendezvous store",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, metavar="HOST:PORT",
                   help="the address (this host's, on the cluster's network) and port")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from cpuft.distributed.store import serve
    from cpuft.launch.names import parse_endpoint

    host, port = parse_endpoint(args.listen, "--listen")
    serve(host, port)
    return 0
