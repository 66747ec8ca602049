"""YAML text -> data, strictly and safely: the safe loader, one document, no duplicate keys, no alias bombs,
a size cap on files, and every failure a one-line :class:`~lore.validation.ConfigError`."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import yaml

from lore.validation import ConfigError, show

MAX_CONFIG_BYTES = 1 << 20
"""A run config is a few KB (a resolved one ~3 KB); a bigger file is not a config (and PyYAML's pure-Python
loader would take seconds on it)."""


def _yaml_problem(e: Exception, text: str = "") -> str:
    """One line for a PyYAML error in ``text``: the problem and where (``str(e)`` spans several lines)."""
    if isinstance(e, yaml.MarkedYAMLError):
        problem = e.problem or e.context or type(e).__name__
        mark = e.problem_mark or e.context_mark
        at_tab = mark is not None and text[mark.index:mark.index + 1] == "\t"
        if at_tab or "'\\t'" in problem or "\t" in problem:
            problem = "a tab character where YAML expects spaces (YAML indents with spaces only)"
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{problem}{where}"
    if isinstance(e, yaml.reader.ReaderError):
        return f"{e.reason} at character position {e.position}"
    return " ".join(str(e).split())


def _check_duplicate_keys(root: yaml.Node) -> None:
    """Reject a mapping that names a key twice (PyYAML silently keeps the last one).

    Iterative and visiting each node once, so neither deep nesting nor an alias bomb costs more
    than the document's size.
    """
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    name = f"{path}.{key_node.value}" if path else str(key_node.value)
                    if key_node.value in keys:
                        raise ConfigError(f"duplicate key '{show(name)[1:-1]}' "
                                          f"(line {key_node.start_mark.line + 1})")
                    keys.add(key_node.value)
                    stack.append((value_node, name))
                else:
                    stack.append((value_node, path))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))


MAX_YAML_VALUES = 100_000
"""Values (scalars, lists and mappings) a YAML document may hold once its aliases are expanded: a config holds
a few hundred, and a reader that walks the data (a schema check, a repr) pays for every expanded copy."""


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _node_name(root: yaml.Node, target: yaml.Node) -> str:
    """Where ``target`` sits in the document, as ``train.steps`` or ``grid[0].envs`` (the first way found)."""
    queue: collections.deque[tuple[yaml.Node, str]] = collections.deque([(root, "")])
    seen: set[int] = set()
    while queue:
        node, name = queue.popleft()
        if node is target:
            return name or "top level"
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = show(key_node.value)[1:-1] if isinstance(key_node, yaml.ScalarNode) else "?"
                queue.append((value_node, f"{name}.{key}" if name else key))
        elif isinstance(node, yaml.SequenceNode):
            queue.extend((item, f"{name}[{i}]") for i, item in enumerate(node.value))
    return "top level"


def _check_expansion(root: yaml.Node) -> None:
    """Reject an alias that contains itself, and a document that expands to more than :data:`MAX_YAML_VALUES`
    values (an alias bomb), counting each node once (memoised), so the check costs the document's size."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _yaml_children(node))
            if sizes[id(node)] > MAX_YAML_VALUES:
                raise ConfigError(f"{_node_name(root, node)}: more than {MAX_YAML_VALUES:_} values once its aliases "
                                  f"are expanded (line {node.start_mark.line + 1}; an alias bomb?)")
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            raise ConfigError(f"{_node_name(root, node)}: an alias that contains itself "
                              f"(line {node.start_mark.line + 1})")
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in _yaml_children(node) if id(child) not in sizes)


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (about 15x faster on a large file), else the pure-Python one."""


def parse_yaml(text: str) -> Any:
    """Parse one YAML document strictly; every failure is a :class:`ConfigError` with a one-line message."""
    loader = None
    try:
        loader = _SAFE_LOADER(text)  # safe: no Python tags; the reader rejects control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        _check_duplicate_keys(node)
        return loader.construct_document(node)
    except ConfigError:
        raise
    except yaml.YAMLError as e:
        raise ConfigError(f"not valid YAML: {_yaml_problem(e, text)}") from None
    except RecursionError:
        raise ConfigError("not valid YAML for a config: nested too deeply") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"not valid YAML for a config: {' '.join(str(e).split())[:200]}") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: str | Path) -> dict:
    """A YAML file whose top level is a non-empty mapping; any other content is a one-line :class:`ConfigError`."""
    if not str(path).strip():
        raise ConfigError("config file: empty file name")
    path = Path(path)
    try:
        if path.is_dir():
            raise ConfigError(f"config file {path} is a directory")
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {path} is too large ({path.stat().st_size} bytes; a config is a few KB)")
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"config file {path}: cannot read it ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}; "
                          f"a binary file?)") from None
    try:
        data = parse_yaml(text)
    except ConfigError as e:
        raise ConfigError(f"config file {path}: {e}") from None
    if data is None:
        raise ConfigError(f"config file {path} is empty (expected a mapping of settings, e.g. 'train: {{steps: 1000}}')")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping of settings, got {type(data).__name__}")
    return data
