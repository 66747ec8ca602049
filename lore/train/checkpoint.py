"""Checkpoints: plain tensors and containers, written atomically, read with ``torch.load(weights_only=True)``.

A checkpoint holds nothing that needs unpickling of arbitrary classes: numpy arrays and scalars become
tagged byte strings, the replay storage keeps only its filled rows (zlib-compressed), and the pickled
training envs are read back by :func:`load_envs`, which resolves only the classes an env is made of and
calls nothing but numpy's and the enums' own constructors. So a tampered ``checkpoint.pt`` is refused,
not executed. The RNG states make a resumed CPU run bit-identical.
"""

from __future__ import annotations

import enum
import io
import os
import pickle
import random
import re
import warnings
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from lore.utils.io import NoSpaceError, UnsafeFileError, atomic_write_bytes, open_regular

FORMAT = 2
"""Layout version of ``checkpoint.pt``; other versions are refused with a clear message."""
_NDARRAY = "__lore_ndarray__"
_ROWS = "__lore_rows__"
_PLAIN = (str, bytes, int, float, torch.Tensor, torch.Size, torch.dtype, torch.device)
MODULE_KEYS = ("wm", "actor", "critic", "slow_critic")
"""Agent-state entries that are ``nn.Module`` state dicts (parameter names and shapes fixed by the config)."""


class CheckpointError(RuntimeError):
    pass


# --------------------------------------------------------------------------- RNG


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


# --------------------------------------------------------------------------- plain form


def to_plain(obj, where: str = "checkpoint"):
    """``obj`` with numpy arrays and scalars replaced by tagged dicts of bytes (a ``weights_only`` payload)."""
    if isinstance(obj, (np.ndarray, np.generic)):
        arr = np.asarray(obj)
        if arr.dtype.hasobject:
            raise TypeError(f"{where}: numpy array of objects cannot be stored")
        return {_NDARRAY: arr.dtype.str, "shape": list(arr.shape), "scalar": isinstance(obj, np.generic),
                "data": arr.tobytes()}
    if isinstance(obj, Mapping):
        return _same_mapping(obj, {k: to_plain(v, f"{where}.{k}") for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_plain(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if obj is None or isinstance(obj, _PLAIN):
        return obj
    raise TypeError(f"{where}: a {type(obj).__name__} cannot be stored in a checkpoint")


def from_plain(obj):
    """Inverse of :func:`to_plain`."""
    if isinstance(obj, Mapping):
        if _NDARRAY in obj:
            arr = np.frombuffer(obj["data"], dtype=np.dtype(obj[_NDARRAY])).reshape(obj["shape"]).copy()
            return arr[()] if obj["scalar"] else arr
        return _same_mapping(obj, {k: from_plain(v) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return type(obj)(from_plain(v) for v in obj)
    return obj


def _same_mapping(original: Mapping, items: dict) -> dict:
    """``items`` as an OrderedDict (with a module state dict's ``_metadata``) when ``original`` was one."""
    if not isinstance(original, OrderedDict):
        return items
    out = OrderedDict(items)
    if hasattr(original, "_metadata"):
        out._metadata = original._metadata
    return out


# --------------------------------------------------------------------------- replay storage


def compact_replay(state: dict) -> dict:
    """A replay state dict whose tensor storage keeps only its filled rows, zlib-compressed."""
    storage = state["buffer"]["_storage"]
    tensors = storage.get("_storage")
    if not isinstance(tensors, Mapping):
        return state
    n = int(storage["_len"])
    packed = _same_mapping(tensors, {k: _pack_rows(v, n) if torch.is_tensor(v) else v
                                     for k, v in tensors.items()})
    return {**state, "buffer": {**state["buffer"], "_storage": {**storage, "_storage": packed}}}


def expand_replay(state: dict) -> dict:
    """Inverse of :func:`compact_replay`: the storage back at full capacity (unfilled rows zero)."""
    storage = state["buffer"]["_storage"]
    tensors = storage.get("_storage")
    if not isinstance(tensors, Mapping):
        return state
    full = _same_mapping(tensors, {k: _unpack_rows(v) if isinstance(v, Mapping) and _ROWS in v else v
                                   for k, v in tensors.items()})
    return {**state, "buffer": {**state["buffer"], "_storage": {**storage, "_storage": full}}}


def _pack_rows(t: torch.Tensor, n: int) -> dict:
    rows = t[:n].contiguous().cpu()
    raw = rows.view(torch.uint8).numpy().tobytes() if rows.numel() else b""
    return {_ROWS: n, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "zlib": zlib.compress(raw, 6)}


def _unpack_rows(packed: Mapping) -> torch.Tensor:
    dtype = getattr(torch, packed["dtype"])
    out = torch.zeros(packed["shape"], dtype=dtype)
    n = int(packed[_ROWS])
    if n:
        raw = bytearray(zlib.decompress(packed["zlib"]))
        out[:n] = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(n, *packed["shape"][1:])
    return out


# --------------------------------------------------------------------------- envs


_ENV_PACKAGES = ("lore.envs.", "minigrid.", "crafter.", "gymnasium.spaces.", "gymnasium.envs.registration")
_CALLABLE = {
    ("numpy", "dtype"), ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy.random._pickle", "__bit_generator_ctor"), ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"),
    ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("collections", "defaultdict"), ("collections", "OrderedDict"), ("collections", "deque"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "complex"),
}
"""Globals an env pickle may call (REDUCE): data constructors only."""
_CLASSES = {
    ("numpy", "ndarray"), ("builtins", "object"),
    ("numpy.random._pcg64", "PCG64"), ("numpy.random._pcg64", "PCG64DXSM"), ("numpy.random._mt19937", "MT19937"),
    ("numpy.random._philox", "Philox"), ("numpy.random._sfc64", "SFC64"),
    ("numpy.random.bit_generator", "SeedSequence"), ("numpy.random._generator", "Generator"),
    ("numpy.random.mtrand", "RandomState"),
}
"""Classes an env pickle may name (and create without ``__init__``) besides the env packages' own."""


class _EnvUnpickler(pickle._Unpickler):
    """Resolves numpy's data constructors and the classes (not functions) of the env packages; calls only
    the former and enums. Classes are created without ``__init__`` (NEWOBJ), so naming one runs no code."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file):
        super().__init__(file)
        self._callable: set[int] = set()  # ids of the allowed constructors resolved so far (module globals)

    def find_class(self, module: str, name: str):
        obj = super().find_class(module, name)
        if (module, name) in _CALLABLE:
            self._callable.add(id(obj))
            return obj
        if (module, name) in _CLASSES or _env_member(module, name, obj):
            return obj
        raise pickle.UnpicklingError(f"global {module}.{name} is not part of an environment")

    def _load_reduce(self):
        func = self.stack[-2]
        if not (id(func) in self._callable or (isinstance(func, type) and issubclass(func, enum.Enum))):
            raise pickle.UnpicklingError(f"calling {getattr(func, '__qualname__', type(func).__name__)} "
                                         f"is not allowed")
        pickle._Unpickler.dispatch[pickle.REDUCE[0]](self)

    def _refuse(self):
        raise pickle.UnpicklingError("protocol 0/1 object construction (INST/OBJ) is not allowed")

    dispatch[pickle.REDUCE[0]] = _load_reduce
    dispatch[pickle.INST[0]] = _refuse
    dispatch[pickle.OBJ[0]] = _refuse


def _env_member(module: str, name: str, obj) -> bool:
    """A class of an env package, a MiniGrid mission function (``_gen_mission``, ``_gen_mission_lava``, ...),
    or a function of our own env modules."""
    if not (module + ".").startswith(_ENV_PACKAGES):
        return False
    if isinstance(obj, type):
        return True
    return callable(obj) and (name.rpartition(".")[2].startswith("_gen_mission") or module.startswith("lore.envs."))


def load_envs(data: bytes, path: str | Path):
    """The training envs pickled in a checkpoint, read without running code they do not consist of."""
    try:
        return _EnvUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 - any failure means the saved envs are unusable
        raise CheckpointError(f"checkpoint {path}: the saved environments cannot be restored safely "
                              f"({e.__class__.__name__}: {str(e)[:160]}); move it away to start this run over"
                              ) from e


# --------------------------------------------------------------------------- save / load


def save_checkpoint(path: str | Path, payload: dict) -> None:
    """Serialise ``payload`` (in plain form), write it to a temp file and rename it into place.

    A failed write (a full disk included) leaves the previous checkpoint as it was.
    """
    buf = io.BytesIO()
    torch.save({**to_plain(payload), "version": FORMAT}, buf)
    try:
        atomic_write_bytes(path, buf.getvalue())
    except NoSpaceError as e:
        raise NoSpaceError(f"{e}; the previous checkpoint is kept") from None


def load_checkpoint(path: str | Path) -> dict:
    """The checkpoint at ``path``, loaded with ``weights_only=True``, its fields every run has checked.

    Only a regular file reached through no link out of its folder is read (its own size bounds the read);
    anything else is a :class:`CheckpointError` naming it."""
    path = Path(path)
    try:
        fd = open_regular(path, directory=path.parent)
    except UnsafeFileError as e:
        raise CheckpointError(f"checkpoint {e}") from None
    try:
        with os.fdopen(fd, "rb") as fh, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on an unusual pickle protocol: the error says it all
            payload = torch.load(fh, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        what = _unpickling_refusal(str(e))
        raise CheckpointError(f"checkpoint {path} is not a plain-data LoRe checkpoint ({what}), so nothing in "
                              f"it was run; move it away to start this run over") from None
    except Exception as e:  # noqa: BLE001 - any read failure means the file is unusable
        raise CheckpointError(
            f"checkpoint {path} is corrupt or unreadable ({e.__class__.__name__}: {str(e)[:120]}); "
            f"move it away to start this run over"
        ) from e
    problem = payload_problem(payload)
    if problem:
        raise CheckpointError(f"checkpoint {path} is not a usable LoRe checkpoint: {problem}; "
                              f"move it away to start over")
    return from_plain(payload)


def _unpickling_refusal(message: str) -> str:
    """The reason in torch's weights-only refusal (e.g. the global it would not import), on one short line."""
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", message)
    if found:
        return f"it refers to {found.group(1)}"
    reason = re.search(r"WeightsUnpickler error:(.*?)(Check the documentation|$)", message, re.S)
    return " ".join((reason.group(1) if reason else message).split())[:160]


def payload_problem(payload) -> str | None:
    """What is wrong with the top level of a loaded checkpoint, or None."""
    if not isinstance(payload, dict):
        return f"a {type(payload).__name__}, not a dict"
    if payload.get("version") != FORMAT:
        return f"layout version {payload.get('version')!r}, this release reads {FORMAT}"
    step = payload.get("env_step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return f"env_step is {step!r}, not a non-negative integer"
    if not isinstance(payload.get("agent"), Mapping):
        return "the agent state is missing"
    return None


# --------------------------------------------------------------------------- fit to a config


def agent_mismatch(expected: Mapping, saved: Mapping) -> str | None:
    """The first missing agent-state entry or differing parameter name/shape of ``saved``, or None."""
    missing = [k for k in expected if k not in saved]
    if missing:
        return f"agent state lacks {missing[0]}"
    for key in MODULE_KEYS:
        found = state_mismatch(expected[key], saved[key], f"agent.{key}") if key in expected else None
        if found:
            return found
    return None


def state_mismatch(expected, saved, where: str) -> str | None:
    """The first name or tensor shape in which two nested state dicts differ, or None."""
    if isinstance(expected, Mapping):
        if not isinstance(saved, Mapping):
            return f"{where} is a {type(saved).__name__}, the config needs a mapping"
        missing = [k for k in expected if k not in saved]
        extra = [k for k in saved if k not in expected]
        if missing:
            return f"{where}.{missing[0]} is missing"
        if extra:
            return f"{where}.{extra[0]} is not in this config's model"
        found = (state_mismatch(expected[k], saved[k], f"{where}.{k}") for k in expected)
        return next((m for m in found if m), None)
    if torch.is_tensor(expected):
        if not torch.is_tensor(saved):
            return f"{where} is a {type(saved).__name__}, not a tensor"
        if tuple(saved.shape) != tuple(expected.shape):
            return f"{where} has shape {tuple(saved.shape)}, the config needs {tuple(expected.shape)}"
    return None
