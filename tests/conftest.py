import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _quiet_torch_threads():
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture
def repo_root():
    return REPO
