"""What the statistics look at (kept free of pandas/scipy: the Snakefile imports it on every dry run)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AnalysisSettings:
    """What the statistics look at. The workflow fills it from the ``analysis:`` config section."""

    budgets: tuple[int, ...] = (10_000, 25_000, 50_000)
    """Env-step budgets at which the eval success rate is compared."""
    env_budgets: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Per-environment budgets (e.g. Crafter's 1M-step scale) replacing ``budgets``."""
    headline_budget: int | None = None
    """The budget the paper's headline sentence compares at (None: the first budget with data)."""
    threshold: float = 0.9
    """Success rate for the "env steps to reach SR >= threshold" metric."""
    window_center: float = 10_000
    window_half_width: float = 250
    """The original prototype's metric: cumulative training SR in center ± half_width."""
    baseline: str = "rl_only"
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.budgets or any(int(b) <= 0 for b in self.budgets):
            raise ValueError(f"analysis.budgets must be positive env steps, got {list(self.budgets)}")
        for env, budgets in self.env_budgets.items():
            if not budgets or any(int(b) <= 0 for b in budgets):
                raise ValueError(f"analysis.env_budgets.{env} must be positive env steps, got {list(budgets)}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"analysis.threshold must be in [0, 1], got {self.threshold}")
        if self.window_half_width < 0:
            raise ValueError(f"analysis.window_half_width must be >= 0, got {self.window_half_width}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"analysis.confidence must be in (0, 1), got {self.confidence}")
        if self.resamples < 1:
            raise ValueError(f"analysis.resamples must be >= 1, got {self.resamples}")

    def budgets_for(self, env: str) -> tuple[int, ...]:
        return tuple(int(b) for b in self.env_budgets.get(env, self.budgets))

    @classmethod
    def from_mapping(cls, data: dict | None) -> AnalysisSettings:
        """Build from the workflow's ``analysis:`` mapping; a wrong key, type or value is an error naming it."""
        data = dict(data or {})
        names = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - names, key=str)
        if unknown:
            raise ValueError(f"analysis: unknown key(s) {unknown} (valid: {sorted(names)})")
        if "budgets" in data:
            data["budgets"] = _steps("analysis.budgets", data["budgets"])
        if "env_budgets" in data:
            env_budgets = data["env_budgets"] or {}
            if not isinstance(env_budgets, dict):
                raise ValueError(f"analysis.env_budgets must map environment names to budgets, "
                                 f"got {type(env_budgets).__name__}")
            data["env_budgets"] = {str(k): _steps(f"analysis.env_budgets.{k}", v) for k, v in env_budgets.items()}
        for key in ("headline_budget",):
            if data.get(key) is not None:
                data[key] = _int(f"analysis.{key}", data[key], 1, MAX_STEPS)
        for key, lo, hi in (("resamples", 1, MAX_RESAMPLES), ("seed", 0, 2**32 - 1)):
            if key in data:
                data[key] = _int(f"analysis.{key}", data[key], lo, hi)
        for key in ("threshold", "window_center", "window_half_width", "confidence"):
            if key in data:
                data[key] = _finite(f"analysis.{key}", data[key])
        if "baseline" in data and (not isinstance(data["baseline"], str) or not data["baseline"].strip()):
            raise ValueError(f"analysis.baseline must be an ablation name, got {data['baseline']!r}")
        return cls(**data)


MAX_STEPS = 10**12
MAX_RESAMPLES = 1_000_000
"""Bootstrap resamples beyond this only cost memory: 1e6 already resolves a CI to ~1e-3."""


def _int(key: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")) or int(value) != value:
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{key} must be in [{lo}, {hi}], got {value!r}")
    return int(value)


def _finite(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number, got {value!r}")
    return float(value)


def _steps(key: str, value) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{key} must be a non-empty list of env-step budgets, got {value!r}")
    return tuple(_int(f"{key}[{i}]", v, 1, MAX_STEPS) for i, v in enumerate(value))


def budget_metric(budget: int) -> str:
    return f"sr@{int(budget)}"
