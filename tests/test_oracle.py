"""The oracle policies: the strong oracle weighs the whole bank, the weak oracle the split's
training concepts, both through the core posterior."""

import numpy as np
import pytest

from curi.episodes import EpisodeSampler
from curi.oracles import Oracle
from curi.posterior import Posterior, posterior_predictive
from curi.splits import make_split


@pytest.mark.parametrize("negatives", ["hard", "easy"])
def test_strong_and_weak_choose_their_hypothesis_sets(tiny_bank, negatives):
    split = make_split(tiny_bank, "binding_color")
    strong = Oracle.strong(tiny_bank, negatives=negatives)
    weak = Oracle.weak(tiny_bank, split, negatives=negatives)
    assert isinstance(strong, Posterior) and isinstance(weak, Posterior)
    np.testing.assert_array_equal(strong.hypotheses, np.arange(len(tiny_bank)))
    np.testing.assert_array_equal(weak.hypotheses, np.sort(split.train))
    sampler = EpisodeSampler(tiny_bank, split, "test", negatives, seed=0, size=10)
    for i in range(len(sampler)):
        e = sampler[i]
        for oracle, hyps in ((strong, None), (weak, split.train)):
            want = posterior_predictive(tiny_bank, e, hyps, e.query_ids, negatives=negatives)
            got = oracle.predict(e.support_ids, e.support_labels, e.query_ids)
            np.testing.assert_array_equal(got, want)
        assert e.concept in strong.consistent(e.support_ids, e.support_labels)
        assert e.concept not in weak.consistent(e.support_ids, e.support_labels)  # a test concept
