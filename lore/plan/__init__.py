"""CEM planning in the world model's latent space, seeded by the LLM plan (LoRe layer C)."""

from lore.plan.cem import PlanResult, cem_plan, init_from_plan, init_from_prior, uniform_init
from lore.plan.planner import Planner, PlanOutput

__all__ = ["PlanOutput", "PlanResult", "Planner", "cem_plan", "init_from_plan", "init_from_prior", "uniform_init"]
