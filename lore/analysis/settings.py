"""What the statistics look at (kept free of pandas/scipy: the Snakefile imports it on every dry run)."""

from __future__ import annotations

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
        """Build from the workflow's ``analysis:`` mapping; unknown keys are an error naming them."""
        data = dict(data or {})
        names = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"analysis: unknown key(s) {unknown} (valid: {sorted(names)})")
        if "budgets" in data:
            data["budgets"] = tuple(int(b) for b in data["budgets"])
        if "env_budgets" in data:
            data["env_budgets"] = {k: tuple(int(b) for b in v) for k, v in (data["env_budgets"] or {}).items()}
        return cls(**data)


def budget_metric(budget: int) -> str:
    return f"sr@{int(budget)}"
