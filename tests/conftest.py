import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(config, items):
    """Files with the most ``slow`` tests first (stable otherwise).

    pytest-xdist (``--dist loadfile --no-loadscope-reorder``) hands files to workers in this order, so the
    minutes-long SLURM and workflow files start at once instead of after the many quick files.
    """
    slow: dict[str, int] = {}
    for item in items:
        slow[item.path.name] = slow.get(item.path.name, 0) + int(item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: -slow[item.path.name])


@pytest.fixture(autouse=True)
def _quiet_torch_threads():
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture
def one_thread_fixed_seed():
    """One torch thread and torch's global generator seeded with 0 (network initialisation), so that a test's
    values and the preconditions it asserts do not depend on which tests ran before it. A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_thread_fixed_seed")``."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield


@pytest.fixture
def repo_root():
    return REPO


@pytest.fixture
def broken_minigrid_ids():
    """Two registered ``MiniGrid-*`` ids that cannot run, as an injected fault: one fails to build, one to reset.

    Like the ``MiniGrid-WFC-*`` ids of the minigrid 3.0 wheel (their pattern images are not shipped), they
    pass the registry check of the config and fail only when used.
    """
    import gymnasium
    from minigrid.envs import EmptyEnv

    class FailsToBuild(EmptyEnv):
        def __init__(self, **kwargs):
            raise FileNotFoundError("patterns/Injected.png")

    class FailsToReset(EmptyEnv):
        def __init__(self, **kwargs):
            super().__init__(size=5, **kwargs)

        def reset(self, **kwargs):
            raise FileNotFoundError("patterns/Injected.png")

    ids = {"build": "MiniGrid-LoreInjectedBuildFault-v0", "reset": "MiniGrid-LoreInjectedResetFault-v0"}
    gymnasium.register(ids["build"], entry_point=FailsToBuild)
    gymnasium.register(ids["reset"], entry_point=FailsToReset)
    yield ids
    for name in ids.values():
        gymnasium.registry.pop(name, None)
