"""No module of keras_electra imports itself back, directly or through others.

The graph is read from the source with :mod:`ast`, not by importing: every
``import`` and ``from ... import`` statement counts, at module level or inside a
function (a lazy import hides a circle from Python, not from the design).
``from X import Y`` imports the module ``X.Y`` when there is one (``X/Y.py`` or
``X/Y/``), else ``X``; ``import X.Y`` imports ``X.Y``. A package's ``__init__`` is
an edge target only when it is named itself (``import keras_electra.finetuning``,
``from keras_electra.finetuning import finetune``), not for the packages Python
runs on the way to a submodule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import keras_electra

PACKAGE = "keras_electra"
ROOT = Path(keras_electra.__file__).parent

# Cycles outside finetuning/ that are known and left for later: each one is the set
# of modules of a strongly connected component of the graph. Remove an entry when
# its cycle is gone (the test fails until then, so the list cannot go stale). Empty:
# the last one (convert/__init__ -> convert.hub -> convert, and through
# pretraining.run) went when hub.init_directory wrote its init directory with
# convert.core and convert.hf, not the package's `convert`, and convert_run took
# load_run from pretraining.loading, not the runner.
KNOWN_CYCLES: set[frozenset[str]] = set()


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``root``."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``name`` (the file ``path``) imports anywhere."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def known(target: str) -> str | None:
        """``target`` or its nearest enclosing module that is in ``modules``."""
        while target:
            if target in modules:
                return target
            target = target.rpartition(".")[0]
        return None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(known(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in modules else known(source))
    found.discard(None)
    found.discard(name)
    return found


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


def one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, as a path back to it."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle in {sorted(component)}")


def describe(graph: dict[str, set[str]], components) -> str:
    return "\n".join(
        f"  {' -> '.join(one_cycle(graph, set(c)))}  (component: {sorted(c)})"
        for c in sorted(components, key=sorted)
    )


def touches_finetuning(component) -> bool:
    return any(m.startswith(f"{PACKAGE}.finetuning") for m in component)


def test_no_module_of_finetuning_is_in_an_import_cycle():
    graph = import_graph()
    cycles = [c for c in strongly_connected(graph) if touches_finetuning(c)]
    assert not cycles, "import cycles through finetuning/:\n" + describe(graph, cycles)


def test_the_import_cycles_elsewhere_are_exactly_the_known_ones():
    """Outside finetuning/ only the KNOWN_CYCLES, none now: with the test above, no
    module of keras_electra is in an import cycle."""
    graph = import_graph()
    cycles = {frozenset(c) for c in strongly_connected(graph) if not touches_finetuning(c)}
    new, gone = cycles - KNOWN_CYCLES, KNOWN_CYCLES - cycles
    assert not new, "new import cycles:\n" + describe(graph, new)
    assert not gone, "cycles gone (remove them from KNOWN_CYCLES):\n" + "\n".join(
        f"  {sorted(c)}" for c in gone
    )


def test_the_graph_has_the_edges_it_should():
    """The reader sees what the statements say (a graph without edges has no cycles)."""
    graph = import_graph()
    assert len(graph) > 50
    finetuning = f"{PACKAGE}.finetuning"
    assert f"{finetuning}.run" in graph[finetuning]  # a package's __init__ -> its submodule
    assert f"{finetuning}.layerwise" in graph[f"{finetuning}.run"]
    assert finetuning in graph[f"{PACKAGE}.cli"]  # imported inside a function


def test_finetuning_keeps_its_layers():
    """Task modules import only tasks.base (the registry, tasks/__init__, imports them);
    the saved model's module imports neither the runner nor the backbone loader."""
    graph = import_graph()
    tasks = f"{PACKAGE}.finetuning.tasks"
    modules = {m for m in graph if m.startswith(f"{tasks}.")}
    assert {f"{tasks}.base", f"{tasks}.classify", f"{tasks}.qa", f"{tasks}.tagging"} <= modules
    for module in modules:
        siblings = {m for m in graph[module] if m == tasks or m.startswith(f"{tasks}.")}
        allowed = set() if module == f"{tasks}.base" else {f"{tasks}.base"}
        assert siblings <= allowed, (module, sorted(siblings))
    assert modules <= graph[tasks]
    saved = graph[f"{PACKAGE}.finetuning.saved"]
    assert not saved & {f"{PACKAGE}.finetuning.run", f"{PACKAGE}.finetuning.source"}


def write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_imports_resolve_to_submodules_packages_and_relative_names(tmp_path):
    root = tmp_path / "pkg"
    write(root / "__init__.py", "from pkg.sub import thing\n")
    write(root / "sub" / "__init__.py", "from . import leaf\nfrom .leaf import name\n")
    write(root / "sub" / "leaf.py", "def f():\n    from pkg import other\n")
    write(root / "other.py", "import pkg.sub.leaf as alias\nfrom pkg.sub import deeper\n")
    write(root / "sub" / "deeper.py", "from .. import VERSION\nfrom ..sub import leaf, value\n")
    write(root / "lone.py", "import os\nfrom typing import Any\n")
    graph = import_graph(root, "pkg")
    assert graph == {
        "pkg": {"pkg.sub"},  # `from pkg.sub import thing`: the subpackage's __init__
        "pkg.sub": {"pkg.sub.leaf"},
        "pkg.sub.leaf": {"pkg.other"},  # in a function, and a module, not pkg's __init__
        "pkg.other": {"pkg.sub.leaf", "pkg.sub.deeper"},
        "pkg.sub.deeper": {"pkg", "pkg.sub.leaf", "pkg.sub"},  # a name of pkg, of pkg.sub
        "pkg.lone": set(),
    }
    components = strongly_connected(graph)
    assert components == [{"pkg", "pkg.sub", "pkg.sub.leaf", "pkg.other", "pkg.sub.deeper"}]
    assert one_cycle(graph, components[0]) == [
        "pkg",
        "pkg.sub",
        "pkg.sub.leaf",
        "pkg.other",
        "pkg.sub.deeper",
        "pkg",
    ]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [{"a", "b"}]),
        (
            {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}},
            [{"a", "b", "c"}, {"d", "e"}],
        ),
    ],
)
def test_components_are_found(graph, expected):
    assert sorted(strongly_connected(graph), key=sorted) == expected


def private_reaches(path: Path, root: Path = ROOT) -> list[str]:
    """The places in ``path`` that import Keras' internals (``keras.src``) or assign a
    private attribute (``_name``) of an object other than ``self`` or ``cls``: by
    ``x._name = ...``, ``setattr(x, "_name", ...)`` or ``object.__setattr__``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        where = f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names.append(getattr(node, "module", None) or "")
            if any(n == "keras.src" or n.startswith("keras.src.") for n in names):
                found.append(f"{where} imports keras.src")
        targets = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr.startswith("_")
                and not (isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"))
            ):
                found.append(f"{where} assigns {ast.unparse(target)}")
        if isinstance(node, ast.Call):
            call = ast.unparse(node.func)
            if call.endswith("__setattr__"):
                found.append(f"{where} calls {call}")
            elif call == "setattr" and len(node.args) > 1:
                name = node.args[1]
                private = isinstance(name, ast.Constant) and str(name.value).startswith("_")
                if private or not isinstance(name, ast.Constant):
                    owner = ast.unparse(node.args[0])
                    if owner not in ("self", "cls"):
                        found.append(f"{where} sets an attribute of {owner}")
    return found


def test_no_keras_internals_are_imported_or_private_attributes_patched():
    """Issue 40: a Keras minor release must not be able to turn off the fast path
    silently. The one deliberate reach into a Keras object is a read
    (layers/dense.stored_value), which tests/test_attention.py watches."""
    found = [hit for path in sorted(ROOT.rglob("*.py")) for hit in private_reaches(path)]
    assert not found, "\n".join(found)


def test_the_private_reach_check_sees_what_it_should(tmp_path):
    planted = tmp_path / "keras_electra" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "from keras.src.backend import AutocastScope\n"
        "import keras.src.layers\n"
        "layer._softmax = None\n"
        "object.__setattr__(layer, 'call', f)\n"
        "setattr(layer, '_x', 1)\n"
        "self._fine = 1\n"
        "layer.public = 1\n",
        encoding="utf-8",
    )
    found = private_reaches(planted, planted.parent)
    assert [f.split(" ", 1)[1] for f in found] == [
        "imports keras.src",
        "imports keras.src",
        "assigns layer._softmax",
        "calls object.__setattr__",
        "sets an attribute of layer",
    ], found
