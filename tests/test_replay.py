"""Sequence replay on torchrl: consecutive steps of one env, episode starts marked, resume-safe."""

import numpy as np
import torch

from lore.train.replay import SequenceReplay, empty_row_spec


def _replay(num_envs=2, batch_size=8, batch_length=6, chunk_len=12):
    spec = empty_row_spec({"symbolic": (3,)}, {"symbolic": torch.float32}, num_actions=4, n_features=2)
    return SequenceReplay(spec, num_envs, capacity=10_000, batch_size=batch_size, batch_length=batch_length,
                          chunk_len=chunk_len)


def _row(env, t, episode_len=5):
    first = t % episode_len == 0
    return {
        "obs.symbolic": np.array([env, t, 0], np.float32), "action": np.int64(t % 4), "reward": np.float32(0.0),
        "is_first": first, "is_terminal": (t % episode_len) == episode_len - 1, "is_last": (t % episode_len) == episode_len - 1,
        "llm_prior_logits": np.zeros(4, np.float32), "llm_mask": np.float32(0), "llm_confidence": np.float32(0),
        "llm_beta": np.float32(0), "llm_features": np.zeros(2, np.float32), "llm_features_mask": np.float32(0),
        "llm_source": np.float32(0),
    }


def _fill_two_envs(replay, steps):
    for t in steps:  # two envs written interleaved, as a vectorised loop does
        replay.add(0, _row(0, t))
        replay.add(1, _row(1, 500 + t))


def test_sequences_are_consecutive_steps_of_one_env():
    replay = _replay()
    _fill_two_envs(replay, range(60))
    assert replay.ready()
    for _ in range(5):
        batch = replay.sample()
        obs = batch["obs.symbolic"]
        assert obs.shape == (8, 6, 3)
        envs, times = obs[..., 0], obs[..., 1]
        assert (envs == envs[:, :1]).all(), "a sequence mixed two envs"
        assert (times[:, 1:] - times[:, :-1] == 1).all(), "a sequence skipped or reordered steps"


def test_is_first_and_action_stay_aligned_with_their_obs():
    replay = _replay(num_envs=1)
    for t in range(48):
        replay.add(0, _row(0, t))
    batch = replay.sample()
    t = batch["obs.symbolic"][..., 1].long()
    assert torch.equal(batch["is_first"], t % 5 == 0)
    assert torch.equal(batch["action"], t % 4)
    assert torch.equal(batch["is_terminal"], t % 5 == 4)


def test_staged_rows_are_not_sampled_until_a_chunk_is_full():
    replay = _replay(num_envs=1, chunk_len=12)
    for t in range(11):
        replay.add(0, _row(0, t))
    assert not replay.ready() and len(replay) == 0
    replay.add(0, _row(0, 11))
    assert replay.ready() and len(replay) == 12


def test_state_dict_round_trip_keeps_contents_and_keys():
    replay = _replay()
    _fill_two_envs(replay, range(30))
    other = _replay()
    other.load_state_dict(replay.state_dict())
    assert len(other) == len(replay) and other.next_chunk_id == replay.next_chunk_id
    assert [len(s) for s in other.staging] == [len(s) for s in replay.staging]
    batch = other.sample()
    assert "obs.symbolic" in batch.keys() and batch["obs.symbolic"].shape == (8, 6, 3)


def test_missing_key_is_an_error():
    replay = _replay()
    row = _row(0, 0)
    del row["llm_mask"]
    try:
        replay.add(0, row)
    except KeyError as e:
        assert "llm_mask" in str(e)
    else:
        raise AssertionError("a row without llm_mask was accepted")


def test_writes_after_a_reload_sample_cleanly():
    replay = _replay()
    _fill_two_envs(replay, range(30))
    other = _replay()
    other.load_state_dict(replay.state_dict())
    _fill_two_envs(other, range(30, 60))
    batch = other.sample()
    assert set(batch.keys()) == set(other.spec)
    times = batch["obs.symbolic"][..., 1]
    assert (times[:, 1:] - times[:, :-1] == 1).all()
