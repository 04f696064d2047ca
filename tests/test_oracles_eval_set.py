"""The mAP evaluation set: its packed rows are the bank's truth on the evaluation scenes."""

import numpy as np

from curi.bits import unpack_rows
from curi.oracles.eval_set import EvalSet


def test_eval_set_rows_are_the_truth_on_eval_scenes(tiny_bank):
    evalset = EvalSet.from_bank(tiny_bank)
    dense = unpack_rows(np.asarray(tiny_bank.truth_words), tiny_bank.num_scenes)
    np.testing.assert_array_equal(
        unpack_rows(evalset.rows, len(evalset)), dense[:, tiny_bank.eval_ids]
    )
    assert len(evalset) == len(tiny_bank.eval_ids)
    assert np.bitwise_count(evalset.all_scenes).sum() == len(evalset)
