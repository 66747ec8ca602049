"""The package's layout rules that code review would otherwise have to remember (README "How we write code")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LORE = Path(__file__).resolve().parents[1] / "lore"


def module_name(path: Path) -> str:
    parts = path.relative_to(LORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lore_imports(path: Path, modules: set[str]) -> set[str]:
    """Every ``lore`` module this file imports, at module level or inside functions (a deferred import is
    still a dependency: it only hides the cycle until the function runs). ``from lore.x import y`` depends
    on ``lore.x.y`` when y is a submodule, else on ``lore.x`` itself."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("lore")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("lore"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in LORE.rglob("*.py")}
    return {name: {dep for dep in lore_imports(path, set(modules)) if dep in modules and dep != name}
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def reaches(graph: dict[str, set[str]], package: str) -> set[str]:
    """Every module the modules of ``package`` import, directly or not."""
    seen, todo = set(), [m for m in graph if m == package or m.startswith(package + ".")]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


def test_find_cycle_finds_a_deferred_cycle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_lore_has_no_import_cycles():
    graph = import_graph()
    assert {"lore.config", "lore.presets", "lore.llm.ledger"} <= set(graph)  # the scan sees the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("package", ["lore.sandbox"])
def test_the_feature_sandbox_does_not_depend_on_the_llm_client(package):
    """The sandbox is a security boundary: it must not import the LLM client (or anything that does)."""
    seen = reaches(import_graph(), package)
    assert not {m for m in seen if m.startswith("lore.llm")}, sorted(seen)


def test_the_sandbox_worker_imports_only_the_worker_side():
    """The worker process reaches lore/sandbox/ modules alone, by file path (docs/sandbox.md): it must not
    import the parent's side (runner, process, validation, streaks) or anything else of lore."""
    worker_side = {f"lore.sandbox.{name}" for name in ("worker", "addresses", "checker", "hardening", "namespace",
                                                       "protocol", "results", "rules", "seccomp")}
    assert reaches(import_graph(), "lore.sandbox.worker") == worker_side


def test_lore_uses_torch_compile_not_torch_jit():
    """Scripting (torch.jit) is deprecated; the compiled paths use torch.compile (``train.compile``)."""
    users = sorted(str(p.relative_to(LORE.parent)) for p in LORE.rglob("*.py") if "torch.jit" in p.read_text())
    assert users == []


MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def test_no_module_is_longer_than_700_lines():
    long = {str(p.relative_to(LORE.parent)): n for p in LORE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"split these modules (at most {MAX_MODULE_LINES} lines each): {long}"


def test_no_function_is_longer_than_80_lines():
    long = {}
    for path in LORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long[f"{module_name(path)}.{node.name}"] = n
    assert long == {}, f"split these functions (at most {MAX_FUNCTION_LINES} lines each): {long}"


def private_names_used_across_modules(source: str, own: str, modules: set[str]) -> list[str]:
    """``from lore.x import _name`` and ``x._name`` (``x`` bound to a lore module) in the module ``own`` whose text
    is ``source``, where lore.x is another module: a name another module uses is public (no underscore, a
    docstring)."""
    tree = ast.parse(source)
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("lore"):
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("lore"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in modules:
                    aliases[alias.asname or alias.name] = sub
                elif alias.name.startswith("_") and node.module != own:
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and aliases.get(node.value.id, own) != own):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
    return found


def test_the_private_name_check_finds_both_forms_and_spares_the_own_module():
    modules = {"lore.config", "lore.report", "lore.report.stats", "lore.paper.numbers"}
    source = ("from lore.config import _hidden, shown\nfrom lore.report import stats as st\nimport lore.config as c\n"
              "st._helper(1)\nst.public(2)\nc.__name__\nfrom lore.paper.numbers import _own\n")
    assert private_names_used_across_modules(source, "lore.paper.numbers", modules) == [
        "line 1: from lore.config import _hidden", "line 4: st._helper (lore.report.stats)"]


def test_no_private_name_is_used_across_modules():
    modules = {module_name(p) for p in LORE.rglob("*.py")}
    found = {module_name(p): hits for p in LORE.rglob("*.py")
             if (hits := private_names_used_across_modules(p.read_text(), module_name(p), modules))}
    assert found == {}, f"make these names public or keep them in their module: {found}"


# --------------------------------------------------------------------------- the rooms and their doors

ROOMS = {
    "lore.envs": "MiniGrid and Crafter behind one interface",
    "lore.dreamer": "DreamerV3: world model, actor-critic",
    "lore.prior": "the LLM prior: mixing, gate, trust, allocation, KL control, distillation",
    "lore.llm": "advice: prompts, backends, cache, call controller",
    "lore.sandbox": "the feature-code sandbox",
    "lore.plan": "CEM planning in latent space",
    "lore.method": "the LoRe method: LoReAgent, advisor, terms",
    "lore.train": "training loop, replay, evaluation, checkpoints",
    "lore.grid": "the workflow grid: config checks, training jobs, status and ETA",
    "lore.experiments": "declared experiments: plan, launch, compare, decide, log",
    "lore.archive": "the run archive: archive, check, restore, reproduce",
    "lore.report": "tables, bootstrap statistics, figures, the benchmark report",
    "lore.paper": "the paper's generated text and PDF, the README's table",
}
"""The rooms the diagram shows; the top-level modules (presets, ablations, validation, cli) and the packages in
:data:`SHARED` (the run configuration, small I/O helpers) are shared by every room."""
SHARED = {"lore.config", "lore.utils"}
ANALYSIS_ROOMS = ("lore.grid", "lore.experiments", "lore.archive", "lore.report", "lore.paper")
"""The rooms that read what training wrote: the workflow grid, experiments, the archive, statistics, the paper."""
DOORS = {
    "transform": "act(transform): the action logits when acting",
    "actor_term": "actor_term: an extra actor-loss term",
    "head": "head: an extra head on the stopped latents",
    "features": "act(features), features.enabled: late-fused encoder features",
    "batch_keys": "batch_keys: the replay keys the terms read",
}
"""DreamerV3's extension points (keyword arguments of DreamerAgent and its act) and what each is for."""
ARCHITECTURE = LORE.parent / "docs" / "architecture.md"
BEGIN, END = "<!-- diagram:start -->", "<!-- diagram:end -->"


def room_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which room imports which (a room: ``lore.<package>``), among :data:`ROOMS`."""
    rooms: dict[str, set[str]] = {}
    for module, deps in graph.items():
        for dep in deps:
            a, b = room_of(module), room_of(dep)
            if a != b and a in ROOMS and b in ROOMS:
                rooms.setdefault(a, set()).add(b)
    return rooms


def dreamer_doors() -> list[str]:
    """The extension points DreamerAgent offers: its keyword-only arguments and act's extra inputs."""
    import inspect

    from lore.dreamer.agent import DreamerAgent

    init = inspect.signature(DreamerAgent.__init__).parameters.values()
    act = inspect.signature(DreamerAgent.act).parameters
    return [p.name for p in init if p.kind is p.KEYWORD_ONLY] + [n for n in ("features", "transform") if n in act]


def architecture_diagram() -> str:
    """The Mermaid diagram of docs/architecture.md, from the import graph and DreamerAgent's signature."""
    rooms = room_graph(import_graph())
    node = {name: name.split(".")[1] for name in ROOMS}
    lines = ["```mermaid", "flowchart TD"]
    lines += [f'    {node[name]}["{name}<br/>{text}"]' for name, text in ROOMS.items()]
    doors = "<br/>".join(DOORS[d] for d in dreamer_doors())
    for a in ROOMS:
        for b in sorted(rooms.get(a, ()), key=list(ROOMS).index):
            label = f' -- "{doors}" ' if (a, b) == ("lore.method", "lore.dreamer") else " "
            lines.append(f"    {node[a]}{label}--> {node[b]}")
    lines.append("```")
    return "\n".join(lines)


def write_architecture() -> None:
    text = ARCHITECTURE.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    ARCHITECTURE.write_text(text[:start] + "\n" + architecture_diagram() + "\n" + text[end:])


def test_the_architecture_diagram_is_the_import_graph():
    """docs/architecture.md shows the rooms as they import each other; rewrite it with
    ``python tests/test_layout.py`` after a change of the layout or of DreamerV3's extension points."""
    text = ARCHITECTURE.read_text()
    shown = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert shown == architecture_diagram(), "docs/architecture.md is stale: run `python tests/test_layout.py`"


def test_every_room_says_its_purpose_in_one_line():
    """Each room's ``__init__.py`` opens with a docstring whose first line says what the room is for."""
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((LORE / room.split(".")[1] / "__init__.py").read_text()))
        assert doc and doc.splitlines()[0].strip(), f"{room}: no one-line purpose in its __init__.py"


def test_every_room_and_door_is_described():
    rooms = {room_of(m) for m in import_graph() if m.count(".") >= 1 and (LORE / m.split(".")[1]).is_dir()}
    assert rooms - SHARED == set(ROOMS), "a package without a line in ROOMS (or a line for one that is gone)"
    assert sorted(dreamer_doors()) == sorted(DOORS), "DreamerAgent's extension points and DOORS differ"


def test_dreamer_is_dreamerv3_alone():
    """lore.dreamer imports nothing of the method, the LLM or the trainer: it can be read, and swapped, alone."""
    outside = {room_of(m) for m in reaches(import_graph(), "lore.dreamer")} - {"lore.dreamer"}
    assert not outside & {"lore.prior", "lore.llm", "lore.plan", "lore.sandbox", "lore.method", "lore.train"}, outside


def test_the_trainer_knows_the_method_through_lore_method_only():
    """lore.train holds a LoReAgent: it imports neither DreamerV3 nor the prior directly, and no analysis."""
    graph = import_graph()
    direct = {room_of(dep) for m, deps in graph.items() if room_of(m) == "lore.train" for dep in deps}
    assert not direct & {"lore.dreamer", "lore.prior", *ANALYSIS_ROOMS}, direct
    assert not {room_of(m) for m in reaches(graph, "lore.train")} & set(ANALYSIS_ROOMS)


if __name__ == "__main__":
    write_architecture()
