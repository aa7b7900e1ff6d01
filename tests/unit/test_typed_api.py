"""``cpuft.fit`` and ``cpuft.optimize`` load lazily (importing cpuft loads no torch), yet type
checkers and editors see their real signatures: a misuse is an error, not ``Any``."""

import subprocess
import sys
from pathlib import Path

import pytest

MISUSE = '''
import torch
import cpuft

model = torch.nn.Linear(2, 2)
cpuft.fit(model, [], max_step=5)
cpuft.fit(model, [], lr="high")
cpuft.optimize(model, dtype="bf16")
cpuft.no_such_name
'''

RIGHT = '''
import torch
import cpuft

model = torch.nn.Linear(2, 2)
result = cpuft.fit(model, [], max_steps=5, lr=1e-3)
optimized = cpuft.optimize(model, dtype=torch.bfloat16)
with cpuft.autocast():
    pass
'''


@pytest.mark.slow
def test_mypy_sees_the_real_signatures(tmp_path: Path) -> None:
    (tmp_path / "misuse.py").write_text(MISUSE)
    (tmp_path / "right.py").write_text(RIGHT)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir",
                           str(root / ".mypy_cache"), str(tmp_path / "misuse.py"),
                           str(tmp_path / "right.py")],
                          capture_output=True, text=True, cwd=root, timeout=600)
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert all("misuse.py" in line for line in errors), proc.stdout
    assert any('"max_step"' in line for line in errors), proc.stdout
    assert any('"lr"' in line and "str" in line for line in errors), proc.stdout
    assert any('of "optimize" matches' in line for line in errors), proc.stdout
    assert any("no_such_name" in line for line in errors), proc.stdout
