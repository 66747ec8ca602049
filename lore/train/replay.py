"""Sequence replay on torchrl: ``TensorDictReplayBuffer`` + ``LazyTensorStorage`` + ``SliceSampler``.

Layout (DreamerV3 convention, see docs/CONTRACTS.md "Replay keys"): row t holds obs_t,
``is_first``/``is_terminal``/``is_last`` of obs_t, the reward received on arriving at obs_t
and the action taken *after* observing obs_t (a dummy 0 on the last row of an episode).
The world model therefore pairs row t's obs with ``action[t-1]`` — never ``action[t]``.

Each env's stream is staged locally and written in contiguous chunks of ``chunk_len``
steps with a unique ``chunk_id``; ``SliceSampler`` slices only inside one chunk, so a
sampled sequence is always one env's consecutive steps. A chunk may span an episode
boundary: ``is_first`` marks it and the RSSM resets its state there (as DreamerV3 does).
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import SliceSampler

LLM_KEYS = ("llm_prior_logits", "llm_mask", "llm_confidence", "llm_beta", "llm_features", "llm_features_mask",
            "llm_source")


def empty_row_spec(obs_shapes: dict[str, tuple], obs_dtypes: dict[str, torch.dtype], num_actions: int,
                   n_features: int) -> dict[str, tuple[tuple, torch.dtype]]:
    """Every key of a replay row with its per-step shape and dtype (fixed from the first write)."""
    spec = {f"obs.{k}": (tuple(shape), obs_dtypes[k]) for k, shape in obs_shapes.items()}
    spec.update({
        "action": ((), torch.int64),
        "reward": ((), torch.float32),
        "is_first": ((), torch.bool),
        "is_terminal": ((), torch.bool),
        "is_last": ((), torch.bool),
        "llm_prior_logits": ((num_actions,), torch.float32),
        "llm_mask": ((), torch.float32),
        "llm_confidence": ((), torch.float32),
        "llm_beta": ((), torch.float32),
        "llm_features": ((n_features,), torch.float32),
        "llm_features_mask": ((), torch.float32),
        "llm_source": ((), torch.float32),
    })
    return spec


def space_row_spec(obs_space, num_actions: int, n_features: int) -> dict[str, tuple[tuple, torch.dtype]]:
    """:func:`empty_row_spec` of a gymnasium Dict observation space (uint8 observations stay uint8)."""
    spaces = obs_space.spaces
    return empty_row_spec({k: tuple(s.shape) for k, s in spaces.items()},
                          {k: (torch.uint8 if s.dtype == np.uint8 else torch.float32) for k, s in spaces.items()},
                          num_actions, n_features)


class SequenceReplay:
    """Replay of fixed-length sequences ``[batch_size, batch_length]`` from per-env streams."""

    def __init__(self, spec: dict[str, tuple[tuple, torch.dtype]], num_envs: int, capacity: int,
                 batch_size: int, batch_length: int, memmap_dir: str | None = None,
                 chunk_len: int | None = None):
        self.spec = spec
        self.num_envs = num_envs
        self.batch_size = batch_size
        self.batch_length = batch_length
        self.chunk_len = chunk_len or 4 * batch_length
        storage = (LazyMemmapStorage(capacity, scratch_dir=memmap_dir) if memmap_dir
                   else LazyTensorStorage(capacity))
        self.buffer = TensorDictReplayBuffer(
            storage=storage,
            sampler=SliceSampler(slice_len=batch_length, traj_key="chunk_id", strict_length=True),
            batch_size=batch_size * batch_length,
        )
        self.staging: list[list[dict]] = [[] for _ in range(num_envs)]
        self.next_chunk_id = 0
        self.rows_written = 0

    def add(self, env_index: int, row: dict) -> None:
        """Stage one row for ``env_index``; full chunks are written to the buffer."""
        missing = set(self.spec) - set(row)
        if missing:
            raise KeyError(f"replay row is missing keys: {sorted(missing)}")
        stage = self.staging[env_index]
        stage.append(row)
        if len(stage) >= self.chunk_len:
            self._flush(env_index)

    def _flush(self, env_index: int) -> None:
        rows = self.staging[env_index]
        if not rows:
            return
        n = len(rows)
        data: dict = {}
        for key, (shape, dtype) in self.spec.items():
            value = torch.as_tensor(np.stack([np.asarray(r[key]) for r in rows])).to(dtype).reshape(n, *shape)
            # "obs.x" is stored nested as ("obs", "x"): the form torchrl restores from a state_dict.
            head, _, tail = key.partition(".")
            if tail:
                data.setdefault(head, {})[tail] = value
            else:
                data[key] = value
        data["chunk_id"] = torch.full((n,), self.next_chunk_id, dtype=torch.int64)
        self.next_chunk_id += 1
        self.buffer.extend(TensorDict(data, batch_size=[n]))
        self.rows_written += n
        self.staging[env_index] = []

    def ready(self) -> bool:
        return self.rows_written >= self.batch_length

    def sample(self) -> TensorDict:
        """``[batch_size, batch_length]`` consecutive rows of one env each."""
        batch = self.buffer.sample().reshape(self.batch_size, self.batch_length)
        # Back to the contract's flat keys ("obs.x").
        batch = batch.flatten_keys(".")
        return batch.select(*self.spec)

    def __len__(self) -> int:
        return len(self.buffer)

    def state_dict(self) -> dict:
        return {
            "buffer": self.buffer.state_dict(),
            "staging": self.staging,
            "next_chunk_id": self.next_chunk_id,
            "rows_written": self.rows_written,
        }

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.staging = state["staging"]
        self.next_chunk_id = state["next_chunk_id"]
        self.rows_written = state["rows_written"]
