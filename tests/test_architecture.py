"""The package's layering (docs/architecture.md): imports point down, never back up, and no unit is too long
to read in one sitting. Read from the source with `ast`, every import counted (those inside functions too)."""
from __future__ import annotations

import ast
import functools
import warnings
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "nas_stab"

# bottom to top: a unit may import units of its own layer or below (docs/architecture.md draws the same list)
LAYERS = [
    ("errors", "textfmt", "csvsafe", "gcsetup", "safefiles"),
    ("registry", "metrics", "space"),
    ("config",),
    ("analysis", "data", "models", "stability", "bench"),
    ("tasks",),
    ("training",),
    ("store",),
    ("search",),
    ("trackers",),
    ("results",),
    ("probe", "estimate", "conform"),
    ("cli",),
]


def _unit(module: str) -> str:
    """The package (or top-level module) of `nas_stab.a.b`: `a`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


@functools.cache
def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(imported nas_stab module, line) for every import statement in the file. `from pkg import x` imports the
    module `pkg.x` when there is one (`from nas_stab import metrics` is an import of nas_stab.metrics), else `pkg`."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    modules = _modules()
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("nas_stab")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("nas_stab"):
                found += [(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target, node.lineno)
                          for a in node.names]
    return found


def module_graph() -> dict[str, dict[str, list[str]]]:
    """module -> imported nas_stab module -> the import sites ("file:line"), every module of the package."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, path in _modules().items():
        for target, line in _imports(name, path):
            if target != name and target in _modules():
                graph[name][target].append(f"{path.relative_to(PKG.parent)}:{line}")
    return graph


# the only modules that import by name (importlib), and why: the registries load a declared component's module the
# first time it is used (registry.py: validating an experiment reads the entries, never loads torch), config's check
# hooks load the components that register checks the first time a group is asked for (a plugin host: config names
# them, never imports them), and results' package exports load their module on first use (the CLI's start-up time)
IMPORTLIB_SITES = {"nas_stab/registry.py", "nas_stab/config/hooks.py", "nas_stab/results/__init__.py"}


def _importlib_sites() -> set[str]:
    found = set()
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module") \
                    or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("__import__", "import_module")):
                found.add(str(path.relative_to(PKG.parent)))
    return found


def package_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the import sites ("file:line")."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, path in _modules().items():
        for target, line in _imports(name, path):
            a, b = _unit(name), _unit(target)
            if a != b and b != "nas_stab":
                graph[a][b].append(f"{path.relative_to(PKG.parent)}:{line}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}, "d": {"a": ["w"]}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": ["x"]}, "b": {}}) == []


def test_from_package_import_module_is_an_import_of_that_module():
    assert "metrics" in package_graph()["config"]  # config/rules_spec.py: `from nas_stab import metrics`


def test_no_import_cycle_among_the_modules_of_a_package():
    """Not even one kept from breaking by a deferred import, a TYPE_CHECKING import or import order: every
    import statement counts, wherever it is."""
    found = cycles(module_graph())
    assert not found, f"import cycles among nas_stab's modules: {found}"


def test_only_the_listed_modules_import_by_name():
    assert _importlib_sites() == IMPORTLIB_SITES


def test_no_import_cycle_among_packages():
    found = cycles(package_graph())
    assert not found, f"import cycles among nas_stab's packages: {found}"


def test_every_unit_is_in_a_layer():
    units = {_unit(n) for n in _modules()} - {"nas_stab"}
    placed = {u for layer in LAYERS for u in layer}
    assert units == placed, f"not in LAYERS: {sorted(units - placed)}; gone: {sorted(placed - units)}"


def test_imports_point_down_the_layers():
    level = {u: i for i, layer in enumerate(LAYERS) for u in layer}
    up = [f"{a} -> {b} ({', '.join(sites)})" for a, targets in package_graph().items() for b, sites in targets.items()
          if level[b] > level[a]]
    assert not up, "imports back up the layers:\n" + "\n".join(up)


def test_config_imports_nothing_above_it():
    graph = package_graph()
    assert set(graph.get("config", {})) <= {"errors", "textfmt", "registry", "metrics", "space"}


def test_the_leaderboard_and_status_read_the_search_s_decisions_and_replay_no_job_source():
    """results/ reads what the search recorded (decisions.jsonl); only `search.replay` runs a job source on
    records (the one-time upgrade of an old run directory), and only the CLI and the search call it."""
    graph = module_graph()
    # (search/sources/transfer_objectives.py is no job source: what a transfer search's outer trial is scored by, which
    # the Pareto table shows too)
    sources = {f"nas_stab.search.sources.{m}" for m in ("bracket", "adaptive", "transfer", "grid", "registry")}
    sources |= {"nas_stab.search.sources", "nas_stab.search.replay"}
    found = [f"{a} -> {b} ({', '.join(sites)})" for a, targets in graph.items() for b, sites in targets.items()
             if a.startswith("nas_stab.results") and b in sources]
    assert not found, "results imports a job source:\n" + "\n".join(found)
    users = {a for a, targets in graph.items() if "nas_stab.search.replay" in targets}
    assert users and all(a.startswith(("nas_stab.cli", "nas_stab.search")) for a in users), users


def test_validating_an_experiment_loads_only_what_its_components_need():
    """A three-line spec validated in a fresh interpreter: its dataset's and model's registry entries and checks,
    no implementation (torch, NumPy), no Optuna without a pruner, no pandas, no tracking backend."""
    import subprocess
    import sys

    code = ("import sys\nfrom nas_stab.config import loads_spec\n"
            "loads_spec('name: x\\ntask: {dataset: {name: digits}}\\nmodel: {arch: mlp_resnet}\\n')\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'numpy', 'optuna', 'pandas', 'sklearn', 'ray', 'mlflow', 'wandb') or m.startswith('nas_stab.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    heavy = [m for m in out if not m.startswith("nas_stab.")]
    assert not heavy, heavy
    loaded = {_unit(m) for m in out}
    assert loaded <= {"config", "data", "models", "registry", "space", "errors", "textfmt", "metrics"}, loaded
    assert not [m for m in out if m in ("nas_stab.models.mlp", "nas_stab.data.tabular", "nas_stab.models.parametrization")]


def test_the_sampler_names_of_the_schema_are_the_registered_ones():
    """`search.sampler`'s values are the contract (config, the schema's Literal and `config.mode.JOB_SOURCES`, the
    ones that name a job source); the implementations are registered above config (Optuna's samplers in
    `search/optuna_study.py`, job sources in `search/sources/`): the two agree, name for name."""
    import typing

    from nas_stab.config.mode import JOB_SOURCES as JOB_SOURCE_NAMES
    from nas_stab.config.schema import SearchConfig
    from nas_stab.search.optuna_study import SAMPLERS
    from nas_stab.search.sources import JOB_SOURCES

    values = set(typing.get_args(typing.get_type_hints(SearchConfig)["sampler"]))
    assert set(JOB_SOURCES.names()) == set(JOB_SOURCE_NAMES)
    assert values == set(SAMPLERS.names()) | set(JOB_SOURCES.names()), values ^ (set(SAMPLERS.names()) | set(JOB_SOURCES.names()))


def test_checks_that_need_a_component_are_registered_by_it():
    from nas_stab.config import hooks

    names = {g: [c.__name__ for c in hooks.checks(g)] for g in hooks.GROUPS}
    assert names["config"] == ["check_dataset", "check_model"]
    assert names["transfer"] == ["check_objectives"] and names["search"] and names["tracking"]
    for module in (m for group in hooks.PROVIDERS.values() for m in group):  # each imports config's hooks, never the reverse
        assert module.startswith("nas_stab.") and _unit(module) != "config"



MAX_FUNCTION_LINES = 80
MODULE_LINES_GUIDE = 400  # a module longer than this is reported (a warning in the test run), never cut to fit
MAX_MODULE_LINES = 600  # one longer than this is too long to read in one sitting: split it at a natural seam


def _long_units() -> tuple[list[str], list[str]]:
    functions, modules = [], []
    for _name, path in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            modules.append(f"{path.relative_to(PKG.parent)} ({len(text.splitlines())} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    functions.append(f"{path.relative_to(PKG.parent)}::{node.name} ({n} lines)")
    return functions, modules


def test_no_function_too_long_to_read():
    functions, _ = _long_units()
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines: " + "; ".join(functions)


def test_no_module_too_long_to_read():
    _, modules = _long_units()
    assert not modules, f"modules over {MAX_MODULE_LINES} lines: " + "; ".join(modules)
    long = sorted(f"{p.relative_to(PKG.parent)} ({n})" for p in _modules().values()
                  if (n := len(p.read_text().splitlines())) > MODULE_LINES_GUIDE)
    if long:
        warnings.warn(f"modules over the {MODULE_LINES_GUIDE}-line guideline (a report, not a gate): {'; '.join(long)}",
                      stacklevel=1)
