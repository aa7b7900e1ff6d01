"""torchrun, with its rendezvous store listening on the rendezvous address alone.

torch's TCPStore server listens on every interface of the host it runs on, whatever address it
is given: a one-host job's store was reachable from the whole network. Run in its place
(``python -m cpuft.distributed.agent`` takes torchrun's arguments), this binds the listening
socket to the rendezvous endpoint's address first and hands it to the store: 127.0.0.1 for a
one-host job, the address that faces the cluster for a multi-host one.
"""

from __future__ import annotations

import errno
import socket
import sys
from typing import Any


def bound_listener(host: str, port: int) -> int:
    """A socket listening on ``host``:``port`` alone; its file descriptor, for a TCPStore. A
    port taken since the launcher checked it ends the agent with one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.create_server((host.strip("[]"), port), family=family, backlog=512)
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        raise SystemExit(f"cpuft agent: port {port} on {host} was taken before the job's store "
                         "could listen there: pass another --master-port") from None
    return listener.detach()


def _patch_store_servers() -> None:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend, dynamic_rendezvous

    def store(host_name: str, port: int, is_master: bool = False,
              **kwargs: Any) -> dist.TCPStore:
        if is_master and kwargs.get("master_listen_fd") is None:
            kwargs["master_listen_fd"] = bound_listener(host_name, port)
        return dist.TCPStore(host_name, port, is_master=is_master, **kwargs)

    c10d_rendezvous_backend.TCPStore = store  # type: ignore[misc,assignment]

    def server(self: Any, master_addr: str, master_port: int) -> dist.TCPStore:
        return store(master_addr, master_port, is_master=True, multi_tenant=True)

    dynamic_rendezvous.DynamicRendezvousHandler._create_tcp_store_server = server  # type: ignore[method-assign]


def failure_lines(failures: dict[int, Any]) -> list[str]:
    """One line per failed rank, which cpuft.launch.run reads (``FAILED_RANK``)."""
    return [f"cpuft agent: rank {rank} (local rank {f.local_rank}) failed with exit code "
            f"{f.exitcode}" for rank, f in sorted(failures.items())]


def main() -> None:
    _patch_store_servers()
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun()
    except ChildFailedError as e:  # the rank's own output said why: no agent traceback
        print("\n".join(failure_lines(e.failures)), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
