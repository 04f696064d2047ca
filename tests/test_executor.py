"""The bit-sliced executor against the scalar reference interpreter and hand-written cases."""

import numpy as np
import pytest
import torch
from reference import crowded_records, number_concepts, reference_eval, substitute_literals

from curi import evaluate, parse, sample_concepts
from curi.bits import unpack_rows
from curi.executor import BitScenes, execute
from curi.scenes import MAX_OBJECTS, records_to_props, sample_scenes


def obj(shape="cube", color="red", material="rubber", size="small", x=1, y=1):
    return {"shape": shape, "color": color, "material": material, "size": size, "x": x, "y": y}


def scene(*objs):
    return {"objects": list(objs)}


@pytest.fixture(scope="module")
def random_pairs():
    sc = sample_scenes(400, seed=9)
    concepts = list(dict.fromkeys(t for t, _ in sample_concepts(4000, seed=21)))[:500]
    return concepts, sc


def test_agrees_with_reference_on_random_pairs(random_pairs):
    concepts, sc = random_pairs
    recs = sc.records(range(len(sc)))
    got = unpack_rows(execute(concepts, BitScenes.from_scenes(sc)), len(sc))
    want = np.array([[reference_eval(c, r) for r in recs] for c in concepts])
    assert got.shape == want.shape == (500, 400)
    np.testing.assert_array_equal(got, want)
    assert 0.02 < want.mean() < 0.98  # the check is not vacuous


def test_torch_path_gives_identical_bits(random_pairs):
    concepts, sc = random_pairs
    bs = BitScenes.from_scenes(sc)
    a = execute(concepts, bs)
    b = execute(concepts, bs.to("cpu"))
    assert isinstance(b, torch.Tensor)
    np.testing.assert_array_equal(b.numpy().view(np.uint64), a)


TWO = scene(obj(color="red", x=2, y=5, size="large"), obj(color="blue", shape="sphere", x=6, y=3))
THREE_RED = scene(obj(color="red"), obj(color="red", shape="sphere"), obj(color="green"))
FIVE_RED = scene(*(obj(color="red", x=8, y=k) for k in range(4, 9)))


@pytest.mark.parametrize(
    "concept, records, expected",
    [
        # equality and both quantifiers
        ("x color? blue = lambda S. exists=", [TWO, THREE_RED], [True, False]),
        ("x color? red = lambda S. for-all=", [TWO, scene(obj(), obj())], [False, True]),
        ("blue x color? = lambda S. exists=", [TWO], [True]),
        # S versus S-x: x is excluded from S-x only
        ("S-x color? red all lambda S. exists=", [TWO, THREE_RED], [True, True]),
        (
            "S-x color? red all lambda S. exists=",
            [scene(obj(color="blue"), obj(color="green"))],
            [False],
        ),
        ("S color? red all lambda S. exists=", [TWO, scene(obj(), obj())], [False, True]),
        ("S-x color? x color? any lambda S. exists=", [TWO, THREE_RED], [False, True]),
        # count= counts x itself when the set is S, not when it is S-x
        ("S color? x color? count= 2 = lambda S. exists=", [THREE_RED, TWO], [True, False]),
        ("S-x color? x color? count= 1 = lambda S. exists=", [THREE_RED, TWO], [True, False]),
        ("S color? red count= 2 > lambda S.", [THREE_RED, TWO], [False, False]),
        ("S color? red count= 1 > lambda S.", [THREE_RED, TWO], [True, False]),
        ("3 S color? red count= > lambda S.", [THREE_RED], [True]),
        # ordered sizes: small < large
        ("x size? small > lambda S. exists=", [TWO, THREE_RED], [True, False]),
        (
            "large x size? > lambda S. exists=",
            [TWO, scene(obj(size="large"), obj(size="large"))],
            [True, False],
        ),
        ("small x size? > lambda S. exists=", [TWO, THREE_RED], [False, False]),
        # locations: operands keep their written order
        ("x locationX? x locationY? > lambda S. exists=", [TWO], [True]),
        ("x locationX? 5 > lambda S. for-all=", [TWO], [False]),
        ("S locationY? 3 any lambda S.", [TWO, THREE_RED], [True, False]),
        ("S locationX? x locationY? any lambda S. exists=", [TWO], [False]),
        # boolean operators
        ("x color? red = x shape? cube = and lambda S. exists=", [TWO, THREE_RED], [True, True]),
        ("x color? red = not x shape? cube = and lambda S. exists=", [TWO], [False]),
        ("x color? green = x shape? sphere = or lambda S. for-all=", [TWO], [False]),
        ("x material? metal = not lambda S. for-all=", [TWO], [True]),
        # the number 8 and the largest counts (the executor once held numbers in 3 bits)
        ("S color? blue count= 8 = lambda S.", [TWO, THREE_RED, FIVE_RED], [False] * 3),
        ("S color? red count= 8 = not lambda S.", [TWO, THREE_RED], [True, True]),
        ("8 7 > lambda S.", [TWO], [True]),
        ("7 8 > lambda S.", [TWO], [False]),
        ("8 8 = lambda S.", [TWO], [True]),
        ("8 S color? red count= > lambda S.", [THREE_RED, FIVE_RED], [True, True]),
        ("S color? red count= 8 > lambda S.", [THREE_RED, FIVE_RED], [False, False]),
        ("S color? red count= 5 = lambda S.", [THREE_RED, FIVE_RED], [False, True]),
        ("S color? red count= 4 > lambda S.", [THREE_RED, FIVE_RED], [False, True]),
        ("S-x color? red count= 4 = lambda S. for-all=", [FIVE_RED], [True]),
        ("S color? x color? count= 5 = lambda S. exists=", [FIVE_RED, TWO], [True, False]),
        # location bin 8 (coded 7) against literals and other locations
        ("x locationX? 8 = lambda S. for-all=", [FIVE_RED, TWO], [True, False]),
        ("x locationX? 7 > lambda S. exists=", [FIVE_RED, TWO], [True, False]),
        ("8 x locationY? > lambda S. exists=", [FIVE_RED], [True]),
        ("8 x locationY? > lambda S. for-all=", [FIVE_RED], [False]),
        ("S locationY? 8 any lambda S.", [FIVE_RED, TWO], [True, False]),
        ("S locationX? 8 count= 5 = lambda S.", [FIVE_RED, TWO], [True, False]),
        # collapsed concept: evaluated once per scene
        (
            "S shape? sphere any lambda S.",
            [TWO, THREE_RED, scene(obj(), obj())],
            [True, True, False],
        ),
    ],
)
def test_hand_written_cases(concept, records, expected):
    got = evaluate(concept, records)
    assert got.tolist() == expected
    assert [reference_eval(concept, r) for r in records] == expected


def test_evaluate_rejects_bad_concept():
    from curi import ConceptError

    with pytest.raises(ConceptError):
        evaluate("x colour? red = lambda S. exists=", [TWO])


@pytest.mark.parametrize("n", [0, 1, MAX_OBJECTS + 1])
def test_evaluate_refuses_records_outside_curi_scenes(n):
    """CURI's scenes hold 2..5 objects (paper section 3). On one object ``S-x`` is empty and
    "all the others are blue" held vacuously (True); such records are refused, one line."""
    from curi import ConceptError

    others_blue = "S-x color? blue all lambda S. exists="
    with pytest.raises(ConceptError, match=rf"record 1 has {n} objects; expected 2\.\.5") as e:
        evaluate(others_blue, [TWO, scene(*[obj()] * n)])
    assert "\n" not in str(e.value)
    assert evaluate(others_blue, [scene(obj(), obj()), TWO]).tolist() == [False, True]


def test_evaluate_unknown_value_is_a_concept_error():
    from curi import ConceptError

    with pytest.raises(ConceptError, match="unknown color 'pink'"):
        evaluate("x color? red = lambda S. exists=", [scene(obj(color="pink"), obj())])


def test_parsed_and_text_inputs_agree(random_pairs):
    concepts, sc = random_pairs
    bs = BitScenes.from_scenes(sc)
    np.testing.assert_array_equal(
        execute(concepts[:20], bs), execute([parse(c) for c in concepts[:20]], bs)
    )


@pytest.fixture(scope="module")
def number_pairs():
    """Concepts full of numbers and locations 1..8 on scenes whose counts reach MAX_OBJECTS."""
    concepts = number_concepts(1500, seed=5)
    drawn = [t for t, _ in sample_concepts(6000, seed=8)]
    concepts += substitute_literals(drawn, seed=6)[:500]
    records = crowded_records(120, seed=7)
    return [parse(c) for c in concepts], records


def test_number_pairs_are_not_vacuous(number_pairs):
    concepts, records = number_pairs
    assert len(concepts) == 2000
    literals = {t for c in concepts for t in c.tokens() if t.isdigit()}
    assert literals == {str(i) for i in range(1, 9)}
    n_obj, props = records_to_props(records)
    assert set(n_obj.tolist()) == set(range(1, MAX_OBJECTS + 1))
    assert props[..., 4:].max() == 8  # location bin 8 occurs
    # some scene has MAX_OBJECTS objects of one colour (count= reaches its maximum)
    full = [r["objects"] for r in records if len(r["objects"]) == MAX_OBJECTS]
    assert any(len({o["color"] for o in objs}) == 1 for objs in full)


def test_numbers_and_locations_1_to_8_agree_with_reference(number_pairs):
    concepts, records = number_pairs
    n_obj, props = records_to_props(records)
    bs = BitScenes.from_arrays(n_obj, props)
    got = unpack_rows(execute(concepts, bs), len(records))
    want = np.array([[reference_eval(c, r) for r in records] for c in concepts])
    wrong = [str(concepts[i]) for i in np.flatnonzero((got != want).any(axis=1))]
    assert not wrong, f"{len(wrong)} of {len(concepts)} concepts wrong, e.g. {wrong[:5]}"
    assert 0.1 < want.mean() < 0.9
    torch_bits = execute(concepts, bs.to("cpu")).numpy().view(np.uint64)
    np.testing.assert_array_equal(torch_bits, execute(concepts, bs))


def test_legacy_location_bins_read_literals_as_the_original_release(number_pairs):
    """``location_bins="legacy"``: locations are read as the original release's 0..7 bins (ours
    minus one) against literals 1..8, so the reference on records with shifted bins agrees."""
    concepts, records = number_pairs
    shifted = [
        {"objects": [{**o, "x": o["x"] - 1, "y": o["y"] - 1} for o in r["objects"]]}
        for r in records
    ]
    n_obj, props = records_to_props(records)
    bs = BitScenes.from_arrays(n_obj, props, location_bins="legacy")
    got = unpack_rows(execute(concepts, bs), len(records))
    want = np.array([[reference_eval(c, r) for r in shifted] for c in concepts])
    wrong = [str(concepts[i]) for i in np.flatnonzero((got != want).any(axis=1))]
    assert not wrong, f"{len(wrong)} of {len(concepts)} concepts wrong, e.g. {wrong[:5]}"
    spec = unpack_rows(execute(concepts, BitScenes.from_arrays(n_obj, props)), len(records))
    assert (spec != got).any(axis=1).mean() > 0.2  # the two readings really differ
    rec = [scene(obj(x=8, y=8), obj(x=3, y=3)), scene(obj(x=1, y=1), obj(x=2, y=2))]
    at = "x locationX? {} = lambda S. exists="
    assert evaluate(at.format(8), rec, location_bins="legacy").tolist() == [False, False]
    assert evaluate(at.format(7), rec, location_bins="legacy").tolist() == [True, False]
    assert evaluate(at.format(8), rec).tolist() == [True, False]
    with pytest.raises(ValueError, match="location_bins"):
        evaluate(at.format(7), rec, location_bins="other")
