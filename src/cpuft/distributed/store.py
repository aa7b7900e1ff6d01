"""The rendezvous store of an elastic job, on a host no spot loss can take.

torchrun's c10d rendezvous keeps its state in one TCPStore. Served by one of the job's own
nodes, it goes with that node, and the survivors can never meet again. Here it is served on its
own, by a process the launcher (or the cluster's own scheduler) runs on a stable host: the login
host, an on-demand node, a small pod. Every agent joins it as a client (``is_host=false``), and
it outlives every worker, so that the agents' exit barrier at the end finds it there.
"""

from __future__ import annotations

import signal
import threading
from datetime import timedelta

from cpuft.distributed.agent import bound_listener
from cpuft.launch.elastic import STORE_READY


def serve(host: str, port: int, stop: threading.Event | None = None) -> None:
    """Serve the store on ``host``:``port`` alone (no other interface) until SIGTERM, SIGINT or
    ``stop``."""
    import torch.distributed as dist

    stop = stop or threading.Event()
    fd = bound_listener(host, port)
    store = dist.TCPStore(host.strip("[]"), port, is_master=True, wait_for_workers=False,
                          multi_tenant=True, master_listen_fd=fd,
                          timeout=timedelta(seconds=60))
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, lambda *_: stop.set())
    print(f"{STORE_READY} {host}:{port}", flush=True)
    while not stop.wait(timeout=1.0):
        pass
    del store
