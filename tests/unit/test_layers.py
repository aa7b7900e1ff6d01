"""The package layers hold: each package imports only its own layer and the layers below, the
lowest layer loads no torch, and only cpuft.launch starts processes."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import cpuft

ROOT = Path(cpuft.__file__).parent
LAYERS = [
    {"errors", "durations", "log", "paths", "topology", "config", "speedplan", "launch",
     "forecast", "testing", "report", "scheduler"},  # torch-free
    {"kernels", "data", "metrics", "distributed", "optim", "envlock"},
    {"speedups", "runtime"},
    {"engine"},
    {"recipes"},
    {"job", "doctor", "api"},
    {"bench"},
    {"cli", "__main__", "__init__"},
]
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def package_of(path: Path) -> str:
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def cpuft_imports(path: Path) -> set[str]:
    """The cpuft packages a module imports anywhere in it, lazily inside functions too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "cpuft" and len(parts) > 1:
                found.add(parts[1])
            elif parts[0] == "cpuft" and isinstance(node, ast.ImportFrom):
                found.update(a.name for a in node.names)
    return found


def test_every_package_has_a_layer():
    packages = {package_of(p) for p in ROOT.rglob("*.py")}
    assert packages <= set(LAYER_OF), packages - set(LAYER_OF)


def test_no_package_imports_a_higher_layer():
    wrong = []
    for path in ROOT.rglob("*.py"):
        own = LAYER_OF[package_of(path)]
        for imported in cpuft_imports(path):
            if imported in LAYER_OF and LAYER_OF[imported] > own:
                wrong.append(f"{path.relative_to(ROOT)} imports cpuft.{imported}")
    assert not wrong, wrong


def test_the_lowest_layer_loads_no_torch():
    modules = [".".join(("cpuft", *p.relative_to(ROOT).with_suffix("").parts)).removesuffix(
        ".__init__") for name in LAYERS[0] for p in
        ([ROOT / f"{name}.py"] if (ROOT / f"{name}.py").exists() else (ROOT / name).rglob("*.py"))]
    script = ("import importlib, sys\n"
              f"for m in {modules!r}: importlib.import_module(m)\n"
              "print(sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert len(modules) > 20 and out.strip() == "[]", out


def starts_processes(path: Path) -> bool:
    """Imports subprocess, or calls os.exec*, os.spawn* or os.fork."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name == "subprocess" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "subprocess":
            return True
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "os" and node.attr.startswith(("exec", "spawn", "fork"))):
            return True
    return False


def test_only_launch_starts_processes():
    starters = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if starts_processes(p))
    assert "launch/proc.py" in starters and all(s.startswith("launch/") for s in starters), \
        starters


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, by its full dotted name (``from a import b``: a and a.b)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_the_engine_knows_no_speed_up():
    wrong = [f"{p.relative_to(ROOT)} imports {m}" for p in (ROOT / "engine").rglob("*.py")
             for m in imported_modules(p) if m.startswith(("cpuft.speedups", "cpuft.runtime"))]
    assert not wrong, wrong


def test_the_command_line_starts_no_process_group():
    """cli parses and prints: joining a job is cpuft.runtime's, through cpuft.distributed."""
    wrong = [f"{p.relative_to(ROOT)} imports {m}" for p in (ROOT / "cli").rglob("*.py")
             for m in imported_modules(p)
             if m.startswith(("torch.distributed", "cpuft.distributed.group"))
             or m in ("cpuft.distributed.init", "cpuft.distributed.context")]
    calls = [str(p.relative_to(ROOT)) for p in (ROOT / "cli").rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.Call)
             and getattr(node.func, "attr", getattr(node.func, "id", "")) in
             ("init_process_group", "init_distributed", "start")]
    assert not wrong and not calls, (wrong, calls)


def test_one_place_makes_the_speed_plan_and_places_the_process():
    """cpuft.runtime.start is the one set-up: nothing else makes a plan or places a process."""
    makers = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                    if re.search(r"\b(make_plan|place_process)\(", p.read_text()))
    assert makers == ["runtime/process.py", "runtime/start.py", "speedplan/speed_plan.py"], makers


def test_tests_mirror_the_packages_and_import_no_other_test_file():
    tests = Path(__file__).parents[1]
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    folders = {p.name for p in (tests / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= packages, folders - packages
    wrong = [f"{p.relative_to(tests)} imports {m}" for p in tests.rglob("test_*.py")
             for m in imported_modules(p) if m.startswith("tests.") and ".test_" in m]
    assert not wrong, wrong
