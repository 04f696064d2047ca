"""lm-eval's Hugging Face model (`lm_eval --model hf`) on exported CURI tasks, offline: a tiny
randomly initialised GPT-2 and a word-level tokenizer trained with `tokenizers` on the
exported text are built here and saved to a folder, as a downloaded model would be; the prompt
lengths in its tokens are reported, and a context shorter than the prompts is refused."""

from __future__ import annotations

import pytest

lm_eval = pytest.importorskip("lm_eval")
transformers = pytest.importorskip("transformers")

from lm_eval import evaluator as lm_evaluator  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from curi.errors import ConfigError  # noqa: E402
from curi.models.lm.export import export_tasks  # noqa: E402
from curi.models.lm.lengths import check_context  # noqa: E402
from curi.models.lm.task import doc_to_text, read_table  # noqa: E402
from curi.splits import make_split  # noqa: E402

TASK = "curi_concept_iid_hard"


def train_tokenizer(texts, folder):
    """A word-level tokenizer of the exported text, saved as a transformers tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]", pad_token="[EOS]"
    )
    fast.save_pretrained(folder)
    return fast


@pytest.fixture(scope="module")
def tiny_model(tiny_bank, tmp_path_factory):
    import torch

    tasks = tmp_path_factory.mktemp("lm_hf_tasks")
    split = make_split(tiny_bank, "concept_iid")
    export_tasks(tiny_bank, [split], tasks, n=1, wording="compact", progress=False)
    texts = [
        doc_to_text(tasks, d) + " => 0 => 1" for d in read_table(tasks / f"{TASK}.docs.jsonl.gz")
    ]
    model_dir = tmp_path_factory.mktemp("tiny_gpt2")
    tok = train_tokenizer(texts, model_dir)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(tok),
        n_positions=512,
        n_embd=16,
        n_layer=2,
        n_head=2,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    transformers.GPT2LMHeadModel(config).save_pretrained(model_dir)
    return tasks, model_dir


def test_tiny_hf_model_runs_through_lm_eval(tiny_model, monkeypatch):
    tasks, model_dir = tiny_model
    monkeypatch.setattr(lm_evaluator, "add_env_info", lambda storage: None)  # pip list: slow
    out = lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(model_dir), "device": "cpu", "dtype": "float32"},
        tasks=[TASK],
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        batch_size=25,
        bootstrap_iters=0,
        log_samples=False,
        verbosity="ERROR",
    )
    res = out["results"][TASK]
    assert 0 <= res["cba,none"] <= 1 and 0 < res["ap,none"] <= 1
    assert out["n-samples"][TASK]["original"] == 25


def test_prompt_lengths_in_the_models_tokens_and_its_context(tiny_model):
    tasks, model_dir = tiny_model
    lengths = check_context(tasks, model_dir, 512)[TASK]
    assert 50 < lengths["tokens"]["median"] <= lengths["tokens"]["max"] <= 512
    assert lengths["tokens"]["max"] < lengths["chars"]["max"] / 3
    with pytest.raises(ConfigError, match=f"{TASK}: prompts of up to .* context of 100"):
        check_context(tasks, model_dir, 100)
