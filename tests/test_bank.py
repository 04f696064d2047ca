"""The concept bank: filters, synonyms, priors, eval set, storage, verified loading."""

import json
import shutil

import numpy as np
import pytest
from reference import reference_eval

from curi import BankConfig, BankError, ConfigError, build_bank, load_bank, parse
from curi.rejection import static_rejection


def test_truth_rows_agree_with_reference_interpreter(tiny_bank):
    rng = np.random.default_rng(0)
    concepts = rng.choice(len(tiny_bank), 60, replace=False)
    scenes = rng.choice(tiny_bank.num_scenes, 150, replace=False)
    records = tiny_bank.scene_records(scenes)
    checked = 0
    for i in concepts:
        row = tiny_bank.truth(int(i))
        for s, rec in zip(scenes, records, strict=True):
            assert row[s] == reference_eval(tiny_bank.concepts[i], rec)
            checked += 1
        # positives are rare: check some of them too
        pos = np.flatnonzero(row)[:5]
        for s, rec in zip(pos, tiny_bank.scene_records(pos), strict=True):
            assert reference_eval(tiny_bank.concepts[i], rec), (tiny_bank.concepts[i], s)
    assert checked == 9000


def test_frequency_filter_and_counts(tiny_bank):
    n = tiny_bank.num_scenes
    rows = np.asarray(tiny_bank.truth_words)
    counts = np.bitwise_count(rows).sum(1)
    np.testing.assert_array_equal(counts, tiny_bank.counts)
    assert counts.min() > 10 and counts.max() < 0.1 * n
    assert len(tiny_bank) >= 500


def test_concepts_are_unique_collapsed_and_not_statically_rejected(tiny_bank):
    assert len(set(tiny_bank.concepts)) == len(tiny_bank)
    for text in tiny_bank.concepts:
        c = parse(text)
        assert c.postfix() == text
        assert static_rejection(c) is None
        assert (c.quantifier is None) == (not c.mentions_x)


def test_synonym_groups_are_exactly_identical_rows(tiny_bank):
    rows = np.asarray(tiny_bank.truth_words)
    groups = tiny_bank.groups
    keys = {}
    for g, r in zip(groups, rows, strict=True):
        keys.setdefault(g, r.tobytes())
        assert keys[g] == r.tobytes()
    assert len({v for v in keys.values()}) == len(keys)  # different groups, different rows
    assert groups.max() + 1 == tiny_bank.manifest["counts"]["synonym_groups"] < len(tiny_bank)


def test_scene_major_matrix_is_the_transpose(tiny_bank):
    from curi.bits import unpack_rows

    by_concept = unpack_rows(np.asarray(tiny_bank.truth_words), tiny_bank.num_scenes)
    by_scene = unpack_rows(np.asarray(tiny_bank.truth_by_scene), len(tiny_bank))
    np.testing.assert_array_equal(by_concept.T, by_scene)


def test_bank_pickles_by_path(tiny_bank):
    import pickle

    blob = pickle.dumps(tiny_bank)
    assert len(blob) < 1000
    assert pickle.loads(blob).concepts == tiny_bank.concepts


def test_priors_and_lengths(tiny_bank):
    lengths = np.array([len(parse(c)) for c in tiny_bank.concepts])
    np.testing.assert_array_equal(tiny_bank.lengths, lengths)
    np.testing.assert_allclose(tiny_bank.log_prior, -0.2 * lengths)
    assert (tiny_bank.pcfg_logprob < 0).all()


def test_eval_set_holds_positives(tiny_bank):
    assert len(tiny_bank.eval_ids) == 3 * len(tiny_bank)
    for k in range(0, len(tiny_bank.eval_ids), 37):
        assert tiny_bank.truth(int(tiny_bank.eval_concepts[k]))[tiny_bank.eval_ids[k]]


def test_static_rejections():
    assert static_rejection(parse("S-x color? red all lambda S. for-all=")) == "forall_with_S-x"
    assert static_rejection(parse("S-x color? red all lambda S. exists=")) is None
    assert static_rejection(parse("x size? x size? > lambda S. exists=")) == "self_comparison"
    assert static_rejection(parse("x locationX? x locationY? = lambda S. exists=")) is None
    assert static_rejection(parse("S color? x color? any lambda S. exists=")) == "set_contains_self"
    assert static_rejection(parse("S-x color? x color? any lambda S. exists=")) is None


def test_same_seed_same_bank(tiny_bank, tmp_path):
    from conftest import TINY

    again = load_bank(build_bank(TINY, tmp_path, progress=False))
    assert again.concepts == tiny_bank.concepts
    np.testing.assert_array_equal(np.asarray(again.truth_words), np.asarray(tiny_bank.truth_words))
    np.testing.assert_array_equal(again.eval_ids, tiny_bank.eval_ids)


def test_manifest_and_reuse(tiny_bank_dir):
    m = json.loads((tiny_bank_dir / "manifest.json").read_text())
    assert m["counts"]["concepts"] == len(load_bank(tiny_bank_dir))
    assert set(m["timings_s"]) == {
        "scenes",
        "sampling",
        "rejection",
        "execution",
        "transposing",
        "filtering",
        "writing",
    }
    assert "truth.npy" in m["files"]


def test_missing_corrupt_and_mismatched_banks(tiny_bank_dir, tmp_path):
    with pytest.raises(BankError, match="bank not found.*curi bank"):
        load_bank(tmp_path / "nowhere")
    copy = tmp_path / "copy"
    shutil.copytree(tiny_bank_dir, copy)
    with open(copy / "concepts.txt", "a") as f:
        f.write("x color? red = lambda S. exists=\n")
    with pytest.raises(BankError, match="corrupt"):
        load_bank(copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(BankError, match="no manifest"):
        load_bank(copy)
    from conftest import TINY

    other = BankConfig(**{**TINY.__dict__, "num_scenes": 12345})
    with pytest.raises(BankError, match=r"different bank.*num_scenes"):
        build_bank(other, tiny_bank_dir.parent, progress=False)


def test_interrupted_build_leaves_nothing_that_loads(tmp_path, monkeypatch):
    import curi.bank_build as build_mod

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_mod, "_synonym_groups", boom)
    cfg = BankConfig(name="small", num_scenes=2000, num_draws=2000, workers=1)
    with pytest.raises(KeyboardInterrupt):
        build_bank(cfg, tmp_path, progress=False)
    assert not (tmp_path / "small").exists()
    assert [p.name for p in tmp_path.iterdir()] == [".small.lock"]  # the lock file stays
    monkeypatch.undo()
    assert len(load_bank(build_bank(cfg, tmp_path, progress=False))) > 0


def test_bad_config_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown bank option"):
        BankConfig.from_mapping({"num_scene": 10})
    with pytest.raises(ConfigError, match="max_fraction"):
        BankConfig.from_mapping({"max_fraction": 2.0})


def test_a_long_bank_name_is_one_line_before_any_file_is_touched(tmp_path):
    """A 300-character name gave ``OSError: File name too long`` from the file system."""
    with pytest.raises(ConfigError, match="bank name has 300 characters; use at most 200"):
        build_bank({"name": "a" * 300, "num_scenes": 1000, "num_draws": 1000}, tmp_path)
    assert list(tmp_path.iterdir()) == []
    BankConfig(name="a" * 200).check()  # the longest name, and its lock and temporaries, fit


@pytest.mark.parametrize("rows, cols, block", [(1, 1, 4), (5, 70, 1), (64, 64, 4), (130, 700, 3)])
def test_bit_transpose_matches_unpacking(rows, cols, block):
    from curi.bits import pack_rows, transpose_blocks, unpack_rows

    bits = np.random.default_rng(rows).random((rows, cols)) < 0.3
    t = np.concatenate(list(transpose_blocks(pack_rows(bits), cols, block=block)))
    assert t.shape == (cols, -(-rows // 64))
    np.testing.assert_array_equal(unpack_rows(t, rows), bits.T)


@pytest.mark.parametrize("rows, cols", [(1, 1), (8, 64), (9, 300), (17, 70), (70, 129)])
def test_byte_codes(rows, cols):
    from curi.bits import byte_codes, pack_rows

    bits = np.random.default_rng(rows).random((rows, cols)) < 0.5
    codes = byte_codes(pack_rows(bits), cols)
    padded = np.zeros((8 * len(codes), cols), np.int64)
    padded[:rows] = bits
    want = (padded.reshape(-1, 8, cols) << np.arange(8)[:, None]).sum(1)
    assert codes.dtype == np.uint8 and codes.shape == (-(-rows // 8), cols)
    np.testing.assert_array_equal(codes, want)


def test_fidelity_options_are_part_of_the_identity_only_when_set(tiny_bank_dir, tmp_path):
    """`location_bins` / `layout` (docs/fidelity.md) change the bank and its identity; at their
    defaults they are left out, so banks built before the options existed are reused. The
    `paper_legacy` preset is these two with the release's depth reading (max_depth 5)."""
    from conftest import TINY

    assert "location_bins" not in TINY.identity() and "layout" not in TINY.identity()
    build_bank(TINY, tiny_bank_dir.parent, progress=False)  # reused, not "a different bank"
    small = {**TINY.__dict__, "num_scenes": 3000, "num_draws": 4000}
    spec = load_bank(build_bank(BankConfig(**{**small, "name": "s"}), tmp_path, progress=False))
    release = {"location_bins": "legacy", "layout": "clevr", "max_depth": 5}
    legacy = BankConfig(**{**small, "name": "l", **release})
    other = load_bank(build_bank(legacy, tmp_path, progress=False))
    assert all(other.config[k] == v for k, v in release.items())
    assert other.concepts != spec.concepts

    # The release's depth reading (docs/fidelity.md section 4): no count inside and/or/not, so
    # the counting split's test set is small; the default depth reading (docs/concepts.md,
    # "Grammar") has such concepts.
    def nested_counts(bank):
        return sum(
            "count=" in c.split() and parse(c).body.op in ("and", "or", "not")
            for c in bank.concepts
        )

    assert nested_counts(other) == 0 < nested_counts(spec)
    assert max(other.lengths) <= 14 < max(spec.lengths)
    from curi.executor import execute

    rows = execute(other.concepts[:200], other.bit_scenes())  # the legacy reading, kept
    np.testing.assert_array_equal(rows, np.asarray(other.truth_words[:200]))
    scaled = {"num_scenes": 3000, "num_draws": 4000, "workers": 1}
    preset = BankConfig.preset("paper_legacy", name="pl", **scaled)  # the preset, tiny scale
    assert (preset.location_bins, preset.layout, preset.max_depth) == ("legacy", "clevr", 5)
    assert load_bank(build_bank(preset, tmp_path, progress=False)).concepts == other.concepts
    with pytest.raises(ConfigError, match="location_bins"):
        BankConfig.from_mapping({"location_bins": "zero"})
    with pytest.raises(ConfigError, match="layout"):
        BankConfig.from_mapping({"layout": "grid"})


def test_bit_scenes_execute_as_the_bank_did(tiny_bank):
    """`ConceptBank.bit_scenes` reproduces the bank's own truth rows (its location reading)."""
    from curi.executor import execute

    rows = execute(tiny_bank.concepts[:50], tiny_bank.bit_scenes())
    np.testing.assert_array_equal(rows, np.asarray(tiny_bank.truth_words[:50]))


def test_a_data_dir_that_is_empty_or_a_file_is_refused(tmp_path):
    """An empty data_dir built the bank in the working folder; a file as data_dir was met
    with "no bank ...; build it with `curi bank ... data_dir=<that file>`"."""
    from curi.bank import open_bank

    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(BankError, match="^data_dir is empty; give a folder"):
        open_bank("tiny", "")
    with pytest.raises(BankError, match=f"^data_dir '{f}' is a file, not a folder; give a folder"):
        open_bank("tiny", f, build=True)
    with pytest.raises(BankError, match=f"is a file \\(under {f}\\), not a folder"):
        build_bank("tiny", f / "sub", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_reused_bank_is_a_debug_line(tiny_bank_dir, caplog):
    """ "bank ... already built; reusing it" came before every error, at INFO."""
    import logging

    from curi.bank import open_bank

    with caplog.at_level(logging.DEBUG, logger="curi.bank"):
        open_bank("tiny", tiny_bank_dir.parent, progress=False)
    reuse = [r for r in caplog.records if "reusing it" in r.getMessage()]
    assert [r.levelno for r in reuse] == [logging.DEBUG]


def test_a_data_folder_where_a_bank_cannot_be_built_is_refused_before_the_build(
    tmp_path, monkeypatch, tiny_bank_dir
):
    """`check_bank` refuses a data folder the bank would be built in that cannot be made
    (under /proc, $CURI_DATA_DIR a file): the build failed at its end, in a traceback
    (issue 44). A bank already there is read, so its folder need not be writable."""
    from curi.bank import check_bank

    with pytest.raises(ConfigError, match="data_dir=/proc/curi-x: the folder /proc is not"):
        check_bank("tiny", "/proc/curi-x", build=True)
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("CURI_DATA_DIR", str(tmp_path / "file"))
    with pytest.raises(ConfigError, match=r"CURI_DATA_DIR=\S+file is a file, not a folder"):
        check_bank("tiny")
    monkeypatch.setenv("CURI_DATA_DIR", str(tiny_bank_dir.parent))
    monkeypatch.setattr("curi.bank.output_path", lambda *a, **k: pytest.fail("checked"))
    assert check_bank("tiny").name == "tiny"
