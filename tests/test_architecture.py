"""The architecture holds: layers import downwards only (counting imports inside functions), few function-level
imports and each says why, and no module but the backend registry keeps its own list of backend names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from flashnerd.dynamics import available_backends

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"flashnerd": ROOT / "source" / "flashnerd", "flashnerd_tasks": ROOT / "tasks",
            "flashnerd_agents": ROOT / "agents"}
# Lowest first; a module may import its own layer and the layers below it.
LAYERS = [
    ("flashnerd", "flashnerd.utils"),
    ("flashnerd.robots",),
    ("flashnerd.types",),
    ("flashnerd.contacts", "flashnerd.sim"),
    ("flashnerd.models",),
    ("flashnerd.dynamics",),
    ("flashnerd.data", "flashnerd.training"),
    ("flashnerd.envs",),
    ("flashnerd.planning",),
    ("flashnerd.viz",),
    ("flashnerd_tasks", "flashnerd_agents"),
    ("flashnerd.cli",),
]
# The one upward import: the task package registers its gym ids when imported.
ALLOWED_UPWARD = {("flashnerd.envs.registry", "flashnerd_tasks")}
MAX_FUNCTION_LEVEL = 5


def _layer(module: str) -> int:
    """Index of the deepest layer entry that `module` lies in."""
    best, depth = None, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and name.count(".") > depth:
                best, depth = i, name.count(".")
    assert best is not None, f"module {module} is in no layer; add it to LAYERS"
    return best


def _modules():
    """(module name, path, parsed tree) of every module of the three packages."""
    for root, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [root, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path, ast.parse(path.read_text())


def _project_imports(tree: ast.Module):
    """(imported module, line, inside a function) for every import of a project module."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        up, in_function = node, False
        while up in parents:
            up = parents[up]
            in_function |= isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef))
        for name in names:
            if name.split(".")[0] in PACKAGES:
                yield name, node.lineno, in_function


def test_layers_import_downwards_only():
    upward = []
    for module, path, tree in _modules():
        for imported, line, _ in _project_imports(tree):
            if _layer(imported) > _layer(module) and (module, imported.split(".")[0]) not in ALLOWED_UPWARD:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_function_level_imports_are_few_and_explained():
    found = []
    for _, path, tree in _modules():
        lines = path.read_text().splitlines()
        for imported, line, in_function in _project_imports(tree):
            if in_function:
                said = "#" in lines[line - 1] or lines[line - 2].strip().startswith("#")
                found.append((f"{path.relative_to(ROOT)}:{line} {imported}", said))
    assert len(found) <= MAX_FUNCTION_LEVEL, [f for f, _ in found]
    assert all(said for _, said in found), [f for f, said in found if not said]


@pytest.mark.parametrize("package", ["flashnerd.types", "flashnerd.sim", "flashnerd.models", "flashnerd.dynamics",
                                     "flashnerd.data", "flashnerd.training", "flashnerd.envs", "flashnerd.planning",
                                     "flashnerd.viz"])
def test_importing_a_layer_loads_no_layer_above_it(package):
    """In a fresh interpreter, importing a package pulls in only its own layer and those below."""
    code = f"import sys, {package}; print(' '.join(m for m in sys.modules if m.startswith('flashnerd')))"
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    above = [m for m in loaded if _layer(m) > _layer(package)]
    assert not above, f"importing {package} loaded {above}"


def _is_backend_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in available_backends()


def test_no_module_but_the_registry_lists_backend_names():
    """No tuple/list/set of backend names and no `== "mujoco"` check outside the registry: such code asks
    `backend_info(name)` or `backend_names(**capabilities)`."""
    found = []
    for module, path, tree in _modules():
        if module == "flashnerd.dynamics.registry":
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and sum(map(_is_backend_name, node.elts)) >= 2:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} lists backend names")
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                     for op in node.ops):
                if any(map(_is_backend_name, [node.left, *node.comparators])):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} compares with a backend name")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("argv, rsl_rl", [(["bench", "env", "--help"], False), (["fit", "--help"], False),
                                          (["train", "--help"], True)])
def test_a_command_imports_its_own_module_only(argv, rsl_rl):
    """A run of one command imports that command's module (and rsl_rl only where the command trains or loads a
    policy)."""
    code = ("import sys, contextlib, io\nfrom flashnerd.cli.main import main\n"
            f"with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n    main({argv!r})\n"
            "print(' '.join(m for m in sys.modules if m.startswith(('flashnerd.cli.', 'rsl_rl'))))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    loaded = set(out.split())
    commands = {m for m in loaded if m.startswith("flashnerd.cli.") and m not in
                {"flashnerd.cli.main", "flashnerd.cli.common", "flashnerd.cli.policy", "flashnerd.cli.overrides",
                 "flashnerd.cli.bench"}}
    assert commands == {"flashnerd.cli." + ".".join(argv[:-1]).replace("-", "_")}, commands
    assert ("rsl_rl" in loaded) == rsl_rl


def test_an_unknown_command_is_answered_with_every_command():
    proc = subprocess.run([sys.executable, "-m", "flashnerd.cli.main", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert all(c in proc.stderr for c in ("list-envs", "train", "bench", "fit-contact-head", "compare-video"))
