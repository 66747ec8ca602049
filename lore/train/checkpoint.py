"""Atomic checkpoints and the RNG state that makes a resumed CPU run bit-identical."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import torch

from lore.utils.io import atomic_write


class CheckpointError(RuntimeError):
    pass


def rng_state() -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def save_checkpoint(path: str | Path, payload: dict) -> None:
    """Write ``payload`` with torch.save to a temp file and rename it into place."""
    atomic_write(path, lambda tmp: torch.save(payload, tmp, pickle_protocol=pickle.HIGHEST_PROTOCOL))


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the file is unusable
        raise CheckpointError(
            f"checkpoint {path} is corrupt or unreadable ({e.__class__.__name__}: {str(e)[:120]}); "
            f"move it away to start this run over"
        ) from e
    if not isinstance(payload, dict) or "env_step" not in payload or "agent" not in payload:
        raise CheckpointError(f"checkpoint {path} is not a LoRe checkpoint (missing keys); move it away to start over")
    return payload
