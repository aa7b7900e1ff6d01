"""A disk that fills while a checkpoint is written: one line naming the disk, the last good
checkpoint intact, no temporary files left (ours or an earlier process's), and saving works
again once there is space."""

import os
import shutil
import subprocess

import pytest
import torch

from cpuft.engine.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from cpuft.errors import CpuftError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def state(step):
    return {"weights": torch.full((256, 1024), float(step)), "step": step}  # 1 MiB


def test_a_full_disk_keeps_the_last_checkpoint(small_disk):
    out = small_disk / "run"
    out.mkdir()
    save_checkpoint(out, 1, state(1))
    stale = out / ".checkpoint-9.tmp-999999"  # a writer that died, long gone
    stale.mkdir()
    (stale / "state.pt").write_bytes(b"x" * 1000)
    filler = small_disk / "filler"
    free = shutil.disk_usage(small_disk).free
    filler.write_bytes(b"\0" * (free - 512 * 1024))
    with pytest.raises(CpuftError) as failed:
        save_checkpoint(out, 2, state(2))
    message = str(failed.value)
    assert f"cannot write checkpoint {out / 'checkpoint-2'} on {small_disk}" in message
    assert f"the last checkpoint, {out / 'checkpoint-1'}, is intact" in message
    assert "\n" not in message
    assert latest_checkpoint(out) == out / "checkpoint-1"
    assert load_checkpoint(out / "checkpoint-1")["step"] == 1
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-1"]
    filler.unlink()
    save_checkpoint(out, 2, state(2))
    assert load_checkpoint(latest_checkpoint(out))["step"] == 2
