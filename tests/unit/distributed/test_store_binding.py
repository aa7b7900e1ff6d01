import datetime
import socket
import subprocess

from cpuft.distributed.env import RankInfo
from cpuft.distributed.group import _attempt_store


def test_rank0_store_listens_on_the_master_address_only(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    store = _attempt_store(RankInfo(0, 1, 0), datetime.timedelta(seconds=10))
    store.set("k", "v")
    listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                               text=True).stdout
    assert f"127.0.0.1:{port}" in listening and f"*:{port}" not in listening
