"""Benchmark of `curi lm export` (docs/lm.md): the nine paper splits, 500 test episodes each,
hard negatives, on the default bank: wall time (target: at most a minute on 2 cores), the
folder's size beside the prompts it holds (an episode's support set is stored once, not once
per document), and prompt lengths in characters and in tokens of a word-level tokenizer
trained on the exported text (as tests/test_lm_models.py trains one; no tokenizer can be
downloaded here), for both wordings.

    python benchmarks/bench_lm_export.py --bank ~/.cache/curi/default [--dry-run]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _report import machine, peak_rss_gib, write_section

from curi import load_bank, make_split
from curi.models.lm.export import export_tasks
from curi.models.lm.task import doc_to_text, read_manifest, read_table

SPLITS = [
    "instance_iid", "concept_iid", "binding_color", "binding_shape", "intrinsic", "extrinsic",
    "counting", "boolean", "complexity",
]  # fmt: skip


def _word_tokens(texts: list[str]) -> list[int]:
    """Token counts of a word-level tokenizer trained on `texts` (`tokenizers`)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    return [len(e.ids) for e in tok.encode_batch(texts)]


def _prompts(folder: Path, per_task: int) -> list[str]:
    """The first `per_task` prompts (with the answer) of every task of a folder."""
    m = read_manifest(folder)
    out = []
    for task in m["tasks"]:
        docs = read_table(folder / f"{task}.docs.jsonl.gz")[:per_task]
        out += [doc_to_text(folder, d) + m["delimiter"] + "1" for d in docs]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample", type=int, default=500, help="prompts per task for token counts")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write the doc")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    t = time.perf_counter()
    splits = [make_split(bank, s) for s in SPLITS]
    t_split = time.perf_counter() - t
    lines = [
        f"Machine: {machine()}; a busy host (other jobs ran beside it).\n",
        f"`curi lm export` of the nine paper splits, {args.n} test episodes each, hard "
        f"negatives, 25 documents an episode ({bank.path.name} bank, {len(bank):,} concepts, "
        f"{bank.num_scenes:,} scenes); median of {args.repeats} runs, the splits made once "
        f"before ({t_split:.1f} s):\n",
        "| wording | export, wall / CPU (s) | folder (MB) | bytes / episode | prompt text (MB) | "
        "chars / prompt, median (max) | tokens / prompt, median (max) |",
        "|---|---|---|---|---|---|---|",
    ]
    for wording in ("full", "compact"):
        with tempfile.TemporaryDirectory() as tmp:
            times, cpu = [], []
            for _ in range(args.repeats):
                t, c = time.perf_counter(), time.process_time()
                export_tasks(bank, splits, tmp, n=args.n, wording=wording, progress=False)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
            size = sum(p.stat().st_size for p in Path(tmp).iterdir())
            m = read_manifest(tmp)
            docs = sum(v["documents"] for v in m["tasks"].values())
            chars_total = sum(
                v["prompt_chars"]["mean"] * v["documents"] for v in m["tasks"].values()
            )
            chars = [v["prompt_chars"] for v in m["tasks"].values()]
            prompts = _prompts(Path(tmp), args.sample)
            tokens = _word_tokens(prompts)
        lines.append(
            f"| {wording} | {statistics.median(times):.1f} / {statistics.median(cpu):.1f} | "
            f"{size / 1e6:.1f} | "
            f"{size / (len(SPLITS) * args.n):,.0f} | {chars_total / 1e6:.0f} | "
            f"{statistics.median(c['median'] for c in chars):,.0f} "
            f"({max(c['max'] for c in chars):,}) | "
            f"{np.median(tokens):,.0f} ({max(tokens):,}) |"
        )
    lines += [
        "",
        f"{docs:,} documents in all. Folder: the gzipped episode and document tables, task "
        "YAMLs, split files, utils.py and the manifest; prompt text: the characters of every "
        "prompt written out in full, which one-document-per-row storage would hold. Tokens: "
        f"the first {args.sample} prompts of each task, a word-level tokenizer (whitespace and "
        "punctuation pre-tokenizer) trained on them; a real model's BPE tokenizer gives other "
        "counts (`curi lm export tokenizer=PATH` reports them).",
        f"\nPeak memory: {peak_rss_gib():.2f} GiB.",
    ]
    body = "\n".join(lines)
    print(body)
    if not args.dry_run:
        write_section("lm-export", body)


if __name__ == "__main__":
    main()
