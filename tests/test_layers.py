"""The package's shape, read from its source with ast: every import points down the layers (one a folder: ui and cli
-> service -> lessons -> measure -> api -> train -> engine -> proposers -> runners -> rule -> methods -> settings ->
models -> records -> errors and options) or stays in its layer, no modules import each other in a circle
(imports inside functions count: they only hide a circle), nothing in the package imports its test helpers
(specviz/models/testing.py), nothing outside specviz/ui imports a UI package (the GPU machine has none), only the front
doors stay at the top and no module grows past what one reading holds."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# top first: each folder of specviz/ is a layer, and the front doors at the top level sit where what they import
# puts them; a module belongs to the layer of its longest matching name (a name matches itself and what is under
# it: "specviz.engine.batch" is not "specviz.measure.batch_bench")
LAYERS = [
    ("ui and cli", ["specviz.ui", "specviz.cli", "specviz.__main__"]),
    ("service", ["specviz.service"]),
    ("lessons", ["specviz.lessons"]),
    ("measure", ["specviz.measure"]),
    ("api", ["specviz.api"]),
    ("train", ["specviz.train"]),
    ("engine", ["specviz.engine"]),
    ("proposers", ["specviz.proposers"]),
    ("runners", ["specviz.runners"]),
    ("rule", ["specviz.rule"]),
    ("methods", ["specviz.methods"]),
    ("settings", ["specviz.settings"]),
    ("models", ["specviz.models"]),
    ("records", ["specviz.records"]),
    ("core", ["specviz"]),
]
FACE = "specviz"  # the package's __init__: it hands the public names on, from every layer
TEST_HELPERS = {"specviz.models.testing"}
UI_PACKAGES = {"gradio", "gradio_client", "plotly", "starlette", "fastapi", "uvicorn"}


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under package_dir (a package is named by its __init__.py)."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(the package's modules that module `name` imports, anywhere in it; the other top-level packages it imports)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    inside, outside = set(), set()

    def add(target: str) -> None:
        if target.split(".")[0] == "specviz":
            while target not in known:  # `from .x import Name`: the module x, not Name
                target = target.rpartition(".")[0]
            inside.add(target)
        else:
            outside.add(target.split(".")[0])

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            for alias in node.names:  # `from . import tree`: the module tree
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    inside.discard(name)
    return inside, outside


def layer_of(name: str) -> int:
    """The index in LAYERS (0: the top) of the longest layer name that `name` falls under."""
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a lower layer to a higher one, as 'module -> module'."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() if a != FACE
                  for b in targets if layer_of(b) < layer_of(a))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    files = modules(ROOT / "specviz")
    graph, outside = {}, {}
    for name, path in files.items():
        graph[name], outside[name] = imports_of(name, path, set(files))
    return graph, outside


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_every_module_has_a_layer(graph):
    inside, _ = graph
    assert all(layer_of(name) is not None for name in inside)
    # names, not string prefixes
    assert layer_of("specviz.measure.batch_bench") == 3 and layer_of("specviz.engine.batch") == 6


def test_every_import_points_down_the_layers(graph):
    inside, _ = graph
    assert upward(inside) == []


def test_no_modules_import_each_other_in_a_circle(graph):
    inside, _ = graph
    assert circles(inside) == []


def test_nothing_in_the_package_imports_its_test_helpers(graph):
    inside, _ = graph
    assert sorted(a for a, targets in inside.items() if targets & TEST_HELPERS and a not in TEST_HELPERS) == []


def test_only_the_ui_imports_ui_packages(graph):
    _, outside = graph
    assert sorted(a for a, packages in outside.items() if packages & UI_PACKAGES and layer_of(a) != 0) == []
    assert outside["specviz.ui.app"] & UI_PACKAGES  # the reading sees the UI's own imports


# what the web layer reaches only through the service and the library's front door (specviz.api)
BENEATH_THE_WEB_LAYER = ("specviz.engine", "specviz.proposers", "specviz.runners", "specviz.models", "specviz.rule")


def reaching_beneath(graph: dict[str, set[str]]) -> list[str]:
    """Every import from the web layer (specviz.ui) straight into the engine's layers, as 'module -> module'."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() if a == "specviz.ui" or a.startswith("specviz.ui.")
                  for b in targets if any(b == layer or b.startswith(layer + ".") for layer in BENEATH_THE_WEB_LAYER))


def test_the_web_layer_reaches_the_engine_only_through_the_service_and_the_front_door(graph):
    inside, _ = graph
    assert reaching_beneath(inside) == []
    changed = {name: set(targets) for name, targets in inside.items()}
    changed["specviz.ui.readouts"].add("specviz.models.loading")  # the control: one such import is caught
    assert reaching_beneath(changed) == ["specviz.ui.readouts -> specviz.models.loading"]


def test_an_upward_import_or_a_circle_is_caught(graph):
    """The control: the real graph with one import added from the runners up to the engine (which reaches the
    runners, so it is also a circle), and a circle of three made-up modules."""
    inside, _ = graph
    changed = {name: set(targets) for name, targets in inside.items()}
    changed["specviz.runners.static"].add("specviz.engine.run")
    assert upward(changed) == ["specviz.runners.static -> specviz.engine.run"]
    assert any({"specviz.runners.static", "specviz.engine.run"} <= set(c) for c in circles(changed))
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_inside_functions_and_relative_forms_are_read(tmp_path):
    """`from . import x`, `from ..x import Name` and an import inside a function each give an arrow."""
    package = tmp_path / "specviz"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "core.py", "sub/__init__.py", "sub/leaf.py"):
        (package / name).write_text("")
    (package / "sub" / "user.py").write_text(
        "from . import leaf\nfrom ..core import Name\n\ndef later():\n    import specviz.sub\n")
    files = modules(package)
    inside, _ = imports_of("specviz.sub.user", files["specviz.sub.user"], set(files))
    assert inside == {"specviz.sub.leaf", "specviz.core", "specviz.sub"}


FRONT_DOORS = {"__init__", "__main__", "api", "cli", "settings", "options", "errors", "methods"}
MAX_LINES = 500  # past this a module holds more than one job (split it at its seams)


def top_level_strays(package_dir: Path) -> list[str]:
    """The modules at the package's top level that are not its front doors (the rest live in a layer's folder)."""
    return sorted(p.stem for p in package_dir.glob("*.py") if p.stem not in FRONT_DOORS)


def oversized(package_dir: Path, limit: int = MAX_LINES) -> list[str]:
    """'path: lines' for every module of the package over `limit` lines."""
    return [f"{p.relative_to(package_dir.parent)}: {n}" for p in sorted(package_dir.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > limit]


def test_only_the_front_doors_stay_at_the_top_level():
    assert top_level_strays(ROOT / "specviz") == []


def test_no_module_is_over_the_line_limit():
    assert oversized(ROOT / "specviz") == []


def test_a_stray_module_or_a_long_one_is_caught(tmp_path):
    """The control: a package with a stray top-level module and one module a line over the limit."""
    package = tmp_path / "specviz"
    (package / "engine").mkdir(parents=True)
    (package / "api.py").write_text("")
    (package / "helpers.py").write_text("")
    (package / "engine" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (package / "engine" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert top_level_strays(package) == ["helpers"]
    assert oversized(package) == [f"specviz/engine/long.py: {MAX_LINES + 1}"]


def tag_reads(source: str) -> list[str]:
    """Where code reads a record by a string tag in its first place (`record[0] == "row"`): the dispatch that
    typed events (specviz.service.events) replace."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Subscript):
            index = node.left.slice
            if isinstance(index, ast.Constant) and index.value == 0 and any(
                    isinstance(c, ast.Constant) and isinstance(c.value, str) for c in node.comparators):
                found.append(ast.unparse(node))
    return found


def test_the_web_layer_and_the_service_dispatch_on_event_types_not_tags():
    places = {str(path.relative_to(ROOT)): tag_reads(path.read_text())
              for folder in ("ui", "service") for path in (ROOT / "specviz" / folder).rglob("*.py")}
    assert {path: reads for path, reads in places.items() if reads} == {}
    assert tag_reads('if record[0] == "row":\n    pass') == ["record[0] == 'row'"]  # the control
