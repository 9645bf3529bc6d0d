"""The architecture, enforced (docs/architecture.md): imports go one way and never in a circle.

Every ``import`` statement of ``dspark_ref``, ``conformance`` and ``fixtures`` is parsed
(module level and inside functions alike, ``if TYPE_CHECKING:`` blocks excepted: they never
run), giving a graph of module -> module edges. Checked:

* ``dspark_ref`` imports nothing from ``conformance`` or ``fixtures``;
* ``conformance`` never imports ``fixtures`` (the mutants, a checkout's, are found by name);
* the judge shares no code with the judged (STYLE habit 17): no module of ``conformance``
  but the reference adapter imports ``dspark_ref`` (the last exception, the tiny S9 models,
  went when the suite got its own, ``conformance.inputs.tiny_models``);
* the judge's rooms (``conformance.spec``, ``oracles``, ``inputs``, ``stats``, ``report``)
  import nothing from ``dspark_ref``, and the constants, oracles and inputs nothing of the
  suite, the adapters or the run's wiring above them;
* no test module imports another test module;
* no cycle between modules, and none between the packages of ``conformance``: the core
  (top-level modules) never imports ``suite``, ``report``, ``power`` or ``drift`` except
  from the CLI;
* docs/architecture.md's map links every constant, input, oracle, test and mutant module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dspark_ref", "conformance", "fixtures")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, child.end_lineno + 1))
    return lines


def _imports(path: Path) -> set[str]:
    return _imports_of(path.read_text(), _module_name(path), path.name == "__init__.py")


def _imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names ``module`` imports (``from x import y`` gives both ``x`` and ``x.y``;
    the graph keeps the names that are modules of ours)."""
    tree = ast.parse(source)
    skip = _type_checking_lines(tree)
    here = module.split(".")
    package = here if is_package else here[:-1]
    found = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {name: {m for m in _imports(path) if m in files and m != name} for name, path in files.items()}


GRAPH = _graph()


def _edges(source_prefix: str, target_prefix: str) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in GRAPH.items() for b in targets
                  if (a + ".").startswith(source_prefix + ".") and (b + ".").startswith(target_prefix + "."))


@pytest.mark.parametrize("source, target", [("dspark_ref", "conformance"), ("dspark_ref", "fixtures"),
                                            ("conformance", "fixtures")])
def test_no_import_against_the_layers(source, target):
    assert _edges(source, target) == []


REFERENCE_ADAPTER = "conformance.adapters.reference"


def _dspark_ref_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """``(importer, dspark_ref module)`` for every module of ``conformance`` outside the reference
    adapter (``conformance.adapters.reference`` and any module named ``reference*`` beside it)."""
    return {(a, b) for a, bs in graph.items() for b in bs
            if a.startswith("conformance.") and not a.startswith(REFERENCE_ADAPTER)
            and b.split(".")[0] == "dspark_ref"}


def test_only_the_reference_adapter_imports_dspark_ref():
    assert sorted(_dspark_ref_imports(GRAPH)) == []


def test_the_checker_sees_an_import_of_dspark_ref():
    """A planted import of ``dspark_ref`` (at module level or inside a function) is found;
    the reference adapter's own imports are not."""
    planted = "def f():\n    from dspark_ref._checks import check_int\n"
    graph = {"conformance.stats": {"conformance.budget"},
             "conformance.oracles.probe": _imports_of(planted, "conformance.oracles.probe", False) & set(GRAPH),
             REFERENCE_ADAPTER: {"dspark_ref.markov"}}
    assert _dspark_ref_imports(graph) == {("conformance.oracles.probe", "dspark_ref._checks")}


#: The judge's rooms: the SPEC's constants, its oracles, the seeded inputs, the statistics and
#: the reports. None imports ``dspark_ref``.
JUDGE_ROOMS = ("conformance.spec", "conformance.oracles", "conformance.inputs", "conformance.stats",
               "conformance.report")
#: What the rooms below the suite (constants, oracles, inputs) never import: the tests and
#: their harness, the adapters, the wiring of a run and everything above it.
ABOVE_THE_ROOMS = ("conformance.suite", "conformance.adapters", "conformance.plugin", "conformance.session",
                   "conformance.report", "conformance.power", "conformance.drift", "conformance.cli")


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any((name + ".").startswith(prefix + ".") for prefix in prefixes)


def _room_breaches(graph: dict[str, set[str]]) -> list[str]:
    """Edges out of a judge's room into ``dspark_ref``, and out of the constants, oracles and
    inputs into the suite or above."""
    below = ("conformance.spec", "conformance.oracles", "conformance.inputs")
    return sorted(f"{a} -> {b}" for a, bs in graph.items() for b in bs
                  if (_in(a, JUDGE_ROOMS) and b.split(".")[0] == "dspark_ref")
                  or (_in(a, below) and _in(b, ABOVE_THE_ROOMS)))


def test_the_judges_rooms_import_neither_the_reference_nor_the_suite():
    assert all(any(_in(name, (room,)) for name in GRAPH) for room in JUDGE_ROOMS)
    assert _room_breaches(GRAPH) == []


def test_the_checker_sees_a_room_breach():
    """A planted import of ``dspark_ref`` by an oracle, and of the suite's harness by an input
    builder, are found; the suite importing an oracle is not."""
    planted = "import torch\nfrom dspark_ref.sampling import TEMPERATURE_FLOOR\n"
    graph = {"conformance.oracles.race_oracle": _imports_of(planted, "conformance.oracles.race_oracle", False) & set(GRAPH),
             "conformance.inputs.logits": {"conformance.suite.support.blocks", "conformance.spec"},
             "conformance.suite.test_sampling": {"conformance.oracles.laws", "conformance.spec"}}
    assert _room_breaches(graph) == ["conformance.inputs.logits -> conformance.suite.support.blocks",
                                     "conformance.oracles.race_oracle -> dspark_ref.sampling"]


def test_no_test_module_imports_another():
    def is_test(name: str) -> bool:
        return name.rsplit(".", 1)[-1].startswith("test_")

    assert sorted(f"{a} -> {b}" for a, bs in GRAPH.items() for b in bs if is_test(a) and is_test(b)) == []
    for path in (ROOT / "tests").glob("test_*.py"):
        assert not {m for m in _imports(path) if m.rsplit(".", 1)[-1].startswith("test_")}, path.name


def test_the_core_imports_suite_report_power_and_drift_only_from_the_cli():
    core = {n for n in GRAPH if n.startswith("conformance.") and n.count(".") == 1
            and not (ROOT / "conformance" / n.split(".")[1]).is_dir()} | {"conformance"}
    leaks = sorted(f"{a} -> {b}" for a in core - {"conformance.cli"} for b in GRAPH[a]
                   if b.split(".")[1:2] in (["suite"], ["report"], ["power"], ["drift"]))
    assert leaks == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    # A package's __init__ importing its own submodules is not a cycle of the architecture.
    graph = {a: {b for b in bs if not (a + ".").startswith(b + ".") and not (b + ".").startswith(a + ".")}
             for a, bs in GRAPH.items()}
    assert _cycles(graph) == []


def test_no_cycle_between_packages():
    def package(name: str) -> str:
        """conformance.<sub> and conformance.<sub>.* -> conformance.<sub> (a subpackage's
        ``__init__`` belongs to it); the CLI stands apart, above everything."""
        parts = name.split(".")
        if name == "conformance.cli" or (parts[0] == "conformance" and len(parts) > 1
                                         and (ROOT / "conformance" / parts[1]).is_dir()):
            return ".".join(parts[:2])
        return parts[0]

    graph: dict[str, set[str]] = {}
    for a, bs in GRAPH.items():
        graph.setdefault(package(a), set()).update(package(b) for b in bs if package(b) != package(a))
    assert _cycles(graph) == []


def test_the_checker_sees_a_cycle_and_a_layer_breach():
    """The checks above can fail: a planted cycle and a planted breach are found."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _imports(ROOT / "conformance" / "loading.py") >= {"conformance.contract"}
    inside_a_function = "def f():\n    from fixtures.mutants import load_all\n"
    assert "fixtures.mutants" in _imports_of(inside_a_function, "conformance.probe", False)
    relative = "from ..report import matrix\nif TYPE_CHECKING:\n    from fixtures import x\n"
    assert _imports_of(relative, "conformance.power.probe", False) == {"conformance.report",
                                                                        "conformance.report.matrix"}


#: The folders whose every module the suite's map in docs/architecture.md links.
MAPPED_FOLDERS = ("conformance/spec", "conformance/inputs", "conformance/oracles", "conformance/suite",
                  "conformance/suite/support", "fixtures/mutants")


def test_the_architecture_map_links_every_input_oracle_test_and_mutant_module():
    """docs/architecture.md's map (SPEC section -> inputs -> oracle -> tests -> mutants) links
    every module of those folders: a module added, renamed or moved without the map fails
    here (a link to one that is gone fails tests/test_doc_links.py)."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    linked = {(ROOT / "docs" / target).resolve() for target in re.findall(r"\]\((\.\./[^)#\s]+\.py)\)", doc)}
    modules = {path.resolve() for folder in MAPPED_FOLDERS for path in (ROOT / folder).glob("*.py")
               if path.name not in ("__init__.py", "conftest.py")}
    assert sorted(str(p.relative_to(ROOT)) for p in modules - linked) == []
