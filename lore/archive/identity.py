"""A run's identity: its key ``<ablation>-<hash>``, the same wherever it runs.

A run's key is ``<ablation>-<hash>``, the hash of its identity: the resolved settings that differ from the
defaults of the code reading it (seed and cache paths excluded). A setting added later with a default that
keeps the old behaviour leaves every key as it was; a changed default changes the keys of the runs it
touches.

An entry whose config holds a retired setting (:data:`lore.config.retired.RETIRED`) at another value than its
neutral one is a *retired entry*: the record of a variant that was removed. Its key is computed from its saved
settings as they are, with the retired ones kept (:func:`read_identity`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from lore.archive.files import regular_file
from lore.archive.layout import ArchiveError

IDENTITY_EXCLUDED = ("seed", "llm.cache_path", "llm.shared_cache")
IDENTITY_KEPT = ("ablation", "env.name")
"""Settings in every identity, at their default or not."""


@dataclass(frozen=True)
class Identity:
    """A run's identity as its ``config.yaml`` gives it; ``retired`` as in :class:`Entry`."""

    env: str
    key: str
    seed: int
    retired: tuple[tuple[str, object], ...] = ()


def _flat(value) -> dict:
    from lore.config import dotted

    return dotted(json.loads(json.dumps(value)))


@functools.lru_cache(maxsize=1)
def _defaults() -> dict:
    """The code's default settings, flat (built once per process; callers only read it)."""
    from lore.config import build_config, to_dict

    return _flat(to_dict(build_config(None, [], None)))


def _identity_flat(flat: dict) -> dict:
    defaults = _defaults()
    out = {k: v for k, v in flat.items() if k in IDENTITY_KEPT or k not in defaults or defaults[k] != v}
    for key in IDENTITY_EXCLUDED:
        out.pop(key, None)
    return out


def identity(config: dict) -> dict:
    """``{dotted key: value}`` of a resolved config (``to_dict``) that differ from the code's defaults,
    plus :data:`IDENTITY_KEPT`, minus :data:`IDENTITY_EXCLUDED`."""
    return _identity_flat(_flat(config))


def _key(ablation: str, ident: dict) -> str:
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return f"{ablation}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def run_key(ablation: str, config: dict) -> str:
    """``<ablation>-<10 hex digits of the identity's hash>``: the run's folder name, the same wherever it runs."""
    return _key(ablation, identity(config))


def read_identity(run_dir: Path) -> Identity:
    """The identity of a run directory from its ``config.yaml`` (ArchiveError naming it if unreadable).

    A config the code reads (:func:`lore.config.config_from_saved`) hashes as :func:`run_key` hashes it. One
    that holds retired settings at non-neutral values is a removed variant's run: its identity is its saved
    settings as written (renamed values translated, neutral retired keys dropped) with those retired settings
    kept, each other setting compared with the current defaults as :func:`identity` compares it.
    """
    from lore.config import ConfigError, config_from_saved, load_yaml, to_dict
    from lore.config.retired import drop_retired, retired_values, without_keys

    path = run_dir / "config.yaml"
    regular_file(path)

    def unreadable(e: object) -> ArchiveError:
        return ArchiveError(f"{path}: not a readable run config ({' '.join(str(e).split())[:200]})")

    try:
        data = load_yaml(path)
        retired = retired_values(data, changed_only=True) if isinstance(data, dict) else {}
        if not retired:
            cfg = config_from_saved(path)
            return Identity(cfg.env.name, run_key(cfg.ablation, to_dict(cfg)), int(cfg.seed))
        flat = {**_flat(drop_retired(without_keys(data, retired))), **retired}
    except (ConfigError, OSError, TypeError, ValueError, RecursionError) as e:
        raise unreadable(e) from None
    env, ablation, seed = flat.get("env.name"), flat.get("ablation"), flat.get("seed")
    if not (isinstance(env, str) and env and isinstance(ablation, str) and ablation
            and isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise unreadable(f"env.name {env!r}, ablation {ablation!r}, seed {seed!r}: not a run's identity")
    return Identity(env, _key(ablation, _identity_flat(flat)), seed, tuple(sorted(retired.items())))


def saved_identity(run_dir: Path) -> tuple[str, str, int]:
    """(env, key, seed) of a run the code can run again: a removed variant's run (:func:`read_identity`) is an
    ArchiveError naming its retired setting, as is an unreadable config."""
    ident = read_identity(run_dir)
    if ident.retired:
        raise ArchiveError(f"{run_dir / 'config.yaml'}: {retired_text(ident.retired)}")
    return ident.env, ident.key, ident.seed


def retired_text(retired) -> str:
    """``prior.align_temperature: true, a retired setting (the variant was removed)``."""
    from lore.config.retired import yaml_text

    names = ", ".join(f"{key}: {yaml_text(value)}" for key, value in retired)
    return f"{names}, {'a retired setting' if len(retired) == 1 else 'retired settings'} (the variant was removed)"
