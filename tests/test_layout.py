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
    graph = import_graph()
    seen, todo = set(), [m for m in graph if m == package or m.startswith(package + ".")]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    assert not {m for m in seen if m.startswith("lore.llm")}, sorted(seen)


def test_lore_uses_torch_compile_not_torch_jit():
    """Scripting (torch.jit) is deprecated; the compiled paths use torch.compile (``train.compile``)."""
    users = sorted(str(p.relative_to(LORE.parent)) for p in LORE.rglob("*.py") if "torch.jit" in p.read_text())
    assert users == []
