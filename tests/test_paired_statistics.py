"""Paired intervals that decide: exact up to ten pairs, Monte-Carlo with its error beyond, never a
verdict that moves with the resampling seed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lore.report import stats as st


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_the_exact_interval_equals_enumerating_every_resample(n):
    d = np.random.default_rng(n).normal(0.0, 0.05, size=n)
    everyone = np.array([d[list(ix)].mean() for ix in itertools.product(range(n), repeat=n)])  # n^n resamples
    low, high = np.quantile(everyone, [0.025, 0.975], method="inverted_cdf")
    got = st.exact_paired_interval(d)
    assert got.low == pytest.approx(low, abs=1e-12) and got.high == pytest.approx(high, abs=1e-12)
    assert got.estimate == pytest.approx(d.mean()) and got.mc_error == 0.0


def test_resample_weights_are_the_multinomial_ones():
    for n in range(1, st.EXACT_MAX_PAIRS + 1):
        counts, weights = st.resample_counts(n)
        assert counts.shape[1] == n and (counts.sum(axis=1) == n).all()
        assert len(counts) == len({tuple(c) for c in counts})  # each resample once
        assert weights.sum() == pytest.approx(1.0)
    counts, weights = st.resample_counts(3)
    by_counts = {tuple(c): w for c, w in zip(counts, weights, strict=True)}
    assert by_counts[(3, 0, 0)] == pytest.approx(1 / 27) and by_counts[(1, 1, 1)] == pytest.approx(6 / 27)


def test_a_bound_at_zero_does_not_move_with_the_resampling_seed():
    # a paired difference whose upper bound sits at 0: the Monte-Carlo bootstrap puts it on either side by seed
    x, y = np.array([0.025, 0.218, 0.024, 0.026, 0.194]), np.array([0.044, 0.221, 0.05, 0.054, 0.184])
    mc = {bool(st.paired_difference(x, y, seed=s).high >= 0) for s in range(40)}
    exact = {st.paired_interval(x, y, seed=s) for s in range(40)}
    assert mc == {True, False}  # the verdict "not below" flips with the seed
    assert len(exact) == 1 and next(iter(exact)).high > 0  # it does not


def test_beyond_ten_pairs_the_monte_carlo_error_is_reported_and_small():
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.3, 0.1, 14), rng.normal(0.25, 0.1, 14)
    a, b = st.paired_interval(x, y, seed=0), st.paired_interval(x, y, seed=1)
    assert 0 < a.mc_error < 0.002 and 0 < b.mc_error < 0.002
    assert abs(a.low - b.low) < 6 * max(a.mc_error, b.mc_error)
    assert abs(a.high - b.high) < 6 * max(a.mc_error, b.mc_error)


def test_unequal_or_empty_pairs_are_refused():
    with pytest.raises(ValueError, match="paired_interval"):
        st.paired_interval(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="paired_interval"):
        st.paired_interval(np.zeros(0), np.zeros(0))
