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
import functools
import importlib
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


# === Keras' and TensorFlow's private names (issue 50) ===
# keras_electra/internals.py is the one module that may use them; everywhere else, a use
# is a reach a Keras or TensorFlow release can break without notice.
ADAPTER = ROOT / "internals.py"
FOREIGN = ("keras", "tensorflow", "tf_keras")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _representatives() -> dict[type, object]:
    """An instance of each Keras/TensorFlow class keras_electra builds on, as it is once
    used (built), so that the private attributes set in ``__init__`` and ``build`` count."""
    import keras
    import tensorflow as tf

    dense = keras.layers.Dense(2)
    inputs = keras.Input((3,))
    functional = keras.Model(inputs, dense(inputs))
    norm = keras.layers.LayerNormalization()
    norm.build((None, 3))
    embedding = keras.layers.Embedding(4, 2)
    embedding.build((None,))
    adamw = keras.optimizers.AdamW()
    adamw.build(functional.trainable_variables)
    base = keras.optimizers.Optimizer(learning_rate=0.1)
    base.build(functional.trainable_variables)
    layer = keras.layers.Layer()
    return {
        type(x): x
        for x in (
            dense,
            functional,
            norm,
            embedding,
            adamw,
            base,
            layer,
            keras.Model(),
            keras.Variable(1.0),
            tf.Variable(1.0),
            tf.Module(),
            keras.callbacks.Callback(),
            keras.metrics.Mean(),
            keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()),
            tf.distribute.get_strategy(),
        )
    }


@functools.cache
def _foreign_privates() -> tuple[dict[type, frozenset[str]], frozenset[str]]:
    """Per Keras/TensorFlow class: the private names its class and, where there is one,
    its representative instance have; and the union of them all."""
    per_class: dict[type, frozenset[str]] = {}
    for cls, instance in _representatives().items():
        for base in cls.__mro__:
            if base.__module__.split(".")[0] in FOREIGN:
                per_class.setdefault(base, frozenset(n for n in dir(base) if _private(n)))
        names = {n for n in dir(instance) if _private(n)}  # instance attributes too
        per_class[cls] = per_class.get(cls, frozenset()) | names
    return per_class, frozenset().union(*per_class.values())


@functools.cache
def _package_classes() -> tuple[type, ...]:
    """Every class keras_electra's modules define (those that import here)."""
    classes = []
    for name in module_files(ROOT, PACKAGE):
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra's module
            continue
        classes += [c for c in vars(module).values() if isinstance(c, type)]
    return tuple(c for c in set(classes) if c.__module__.startswith(PACKAGE))


def _class_privates(cls: type | None, bases: list[str]) -> frozenset[str]:
    """The Keras/TensorFlow private names a class inherits: from its runtime MRO where the
    class could be imported, and from every package class it is mixed into (a mixin's
    method named as Keras' private one overrides it there); else (a class made inside a
    function) every known one when a base is spelled ``keras.`` or ``tf.``."""
    per_class, every = _foreign_privates()
    if cls is None:
        return every if any(b.split(".")[0] in ("keras", "tf") for b in bases) else frozenset()
    names: set[str] = set()
    for user in (cls, *(c for c in _package_classes() if cls in c.__mro__)):
        for base in user.__mro__[1:]:
            if base.__module__.split(".")[0] in FOREIGN:
                names |= per_class.get(base) or {n for n in dir(base) if _private(n)}
    return frozenset(names)


def _runtime_class(module: str | None, name: str) -> type | None:
    if module is None:
        return None
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


def private_reaches(path: Path, root: Path = ROOT) -> list[str]:
    """The places in ``path`` that reach into Keras or TensorFlow internals:

    - an import of ``keras.src`` or ``tensorflow.python``, or ``tf.__internal__``;
    - a Keras/TensorFlow private name (see :func:`_foreign_privates`) read, called or
      assigned: on ``self``, ``cls`` or ``super()`` inside a class that inherits it, on
      any other object anywhere, or through ``getattr``/``setattr``/``hasattr``;
    - a method of such a class that overrides one of those names;
    - any private attribute (``_name``) assigned on an object other than ``self`` or
      ``cls``: ``x._name = ...``, ``setattr(x, "_name", ...)`` or ``object.__setattr__``.
    """
    relative = path.relative_to(root.parent)
    module = ".".join(relative.with_suffix("").parts) if root == ROOT else None
    if module and module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    _, every = _foreign_privates()
    found = []

    def where(node) -> str:
        return f"{relative}:{getattr(node, 'lineno', 0)}"

    def visit(node, inherited: frozenset[str]) -> None:
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b) for b in node.bases]
            names = _class_privates(_runtime_class(module, node.name), bases)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in names:
                    found.append(f"{where(item)} overrides {node.name}.{item.name}")
            for child in ast.iter_child_nodes(node):
                visit(child, names)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            modules.append(getattr(node, "module", None) or "")
            for name in modules:
                for internal in ("keras.src", "tensorflow.python"):
                    if name == internal or name.startswith(f"{internal}."):
                        found.append(f"{where(node)} imports {internal}")
        if isinstance(node, ast.Attribute):
            owner = ast.unparse(node.value)
            if node.attr == "__internal__" and owner in ("tf", "tensorflow"):
                found.append(f"{where(node)} uses {owner}.__internal__")
            mine = owner in ("self", "cls", "super()")
            if _private(node.attr) and node.attr in (inherited if mine else every):
                found.append(f"{where(node)} uses {owner}.{node.attr}")
            if (
                _private(node.attr)
                and isinstance(node.ctx, ast.Store)
                and owner not in ("self", "cls")
                and node.attr not in every
            ):
                found.append(f"{where(node)} assigns {owner}.{node.attr}")
        if isinstance(node, ast.Call):
            call = ast.unparse(node.func)
            name = node.args[1] if len(node.args) > 1 else None
            constant = isinstance(name, ast.Constant) and isinstance(name.value, str)
            if call.endswith("__setattr__"):
                found.append(f"{where(node)} calls {call}")
            elif call in ("getattr", "setattr", "hasattr") and constant and name.value in every:
                found.append(f"{where(node)} uses {name.value} through {call}")
            elif call == "setattr" and name is not None:
                if (not constant or _private(name.value)) and ast.unparse(node.args[0]) not in (
                    "self",
                    "cls",
                ):
                    found.append(f"{where(node)} sets an attribute of {ast.unparse(node.args[0])}")
        for child in ast.iter_child_nodes(node):
            visit(child, inherited)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), frozenset())
    return sorted(set(found), key=lambda f: (int(f.split(":")[1].split()[0]), f))


def test_keras_and_tensorflow_internals_are_used_only_in_the_adapter():
    """Issue 50: every reach into Keras' or TensorFlow's internals is in
    keras_electra/internals.py, where each says why and what it was checked against; a
    use anywhere else (a call, a read, an override, an import) fails here."""
    found = [
        hit
        for path in sorted(ROOT.rglob("*.py"))
        if path != ADAPTER
        for hit in private_reaches(path)
    ]
    assert not found, "\n".join(found)


def test_the_adapter_reaches_what_it_says_and_nothing_is_left_unlisted():
    """The adapter does reach (so the check above is not vacuous), and the versions it
    names are the ones installed, or the reaches were not checked against these."""
    import keras
    import tensorflow as tf

    from keras_electra import internals

    reaches = private_reaches(ADAPTER)
    for name in ("_value", "_autoconvert_optionals", "_momentums"):
        assert any(name in r for r in reaches), (name, reaches)
    assert any("overrides" in r and "_maybe_symbolic_build" in r for r in reaches), reaches
    assert any("imports tensorflow.python" in r for r in reaches), reaches
    installed = {"keras": keras.__version__, "tensorflow": tf.__version__}
    assert internals.CHECKED_WITH == installed, (
        "Check keras_electra/internals.py's reaches against the installed Keras and "
        "TensorFlow (the suite runs each), then update CHECKED_WITH."
    )


def test_the_private_reach_check_sees_what_it_should(tmp_path):
    planted = tmp_path / "keras_electra" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "from keras.src.backend import AutocastScope\n"
        "import keras.src.layers\n"
        "from tensorflow.python.ops import control_flow_util\n"
        "layer._softmax = None\n"
        "object.__setattr__(layer, 'call', f)\n"
        "setattr(layer, '_x', 1)\n"
        "self._fine = 1\n"
        "layer.public = 1\n"
        "model._flatten_layers(include_self=False)\n"
        "getattr(variable, '_value', variable)\n"
        "tf.__internal__.distribute.strategy_supports_no_merge_call()\n"
        "class Decayed(keras.optimizers.AdamW):\n"
        "    def _apply_weight_decay(self, variables):\n"
        "        return self._use_weight_decay(variables[0])\n"
        "    def _mine(self):\n"
        "        return self._own\n"
        "class Plain:\n"
        "    def _apply_weight_decay(self):\n"
        "        return self._use_weight_decay\n",
        encoding="utf-8",
    )
    found = private_reaches(planted, planted.parent)
    assert [f.split(" ", 1)[1] for f in found] == [
        "imports keras.src",
        "imports keras.src",
        "imports tensorflow.python",
        "assigns layer._softmax",
        "calls object.__setattr__",
        "sets an attribute of layer",
        "uses model._flatten_layers",
        "uses _value through getattr",
        "uses tf.__internal__",
        "overrides Decayed._apply_weight_decay",
        "uses self._use_weight_decay",
    ], found
