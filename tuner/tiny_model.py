"""The embedded default: a tiny Llama-style target and drafter with random weights.

Nothing can be downloaded here, so TableTune builds its own model: a byte-level BPE tokenizer
trained on a deterministic corpus, a target Llama with random weights saved as real
safetensors, and a much smaller drafter (same tokenizer, so `method: draft_model` works).

What each is for:
- the target makes real step times on vLLM CPU (its forward pass is the cost that grows with B·(k+1));
- `ngram` on repetitive prompts makes real, high acceptance (the prompt already holds the
  continuation the random model keeps repeating);
- random-token prompts make low acceptance (ngram finds no match, the drafter guesses wrong).

Everything is deterministic from `seed`: the same seed writes byte-identical weights. The
tokenizer has a plain chat template (`role: content` lines), so vLLM's /v1/chat/completions
answers too; a model cached before it had one gets it on the next build().
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.core.files import write_atomic

TARGET_SHAPE: dict[str, Any] = dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2)
DRAFTER_SHAPE: dict[str, Any] = dict(hidden_size=64, intermediate_size=172, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1)
VOCAB_SIZE = 2048
MAX_POSITION_EMBEDDINGS = 2048
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
BIGRAM_SEED = 1234   # shared by target and drafter: they must agree on f(t)
BIGRAM_LOGIT = 6.0
LAYER_OUTPUT_SCALE = 0.25  # quieter layers: context nudges the logits, the bigram decides
# one "role: content" line per message, then "assistant: " to generate from
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- message['role'] + ': ' + message['content'] + '\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'assistant: ' -}}{%- endif -%}")
_WORDS = ("def class return import self for in if else while yield with as lambda try except "
          "value index count total batch step token draft accept reject table range start end "
          "model engine table speed time size queue request server client load table goodput").split()


@dataclass(frozen=True, slots=True)
class ModelPaths:
    target: Path
    drafter: Path


def _corpus(seed: int, num_lines: int = 20000) -> list[str]:
    """Code-like text, deterministic from seed: enough structure for BPE merges to mean something."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 12))]
        sep = rng.choice([" ", "_", ".", ", ", "(", " = "])
        lines.append(" " * 4 * rng.randint(0, 2) + sep.join(words) + rng.choice([":", ")", "", " + 1"]))
    return lines


def _train_tokenizer(seed: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_corpus(seed), trainer)
    return tok


def _llama_config(vocab_size: int, shape: dict[str, Any]) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab_size, max_position_embeddings=MAX_POSITION_EMBEDDINGS,  # type: ignore[call-arg]
                       bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                       rms_norm_eps=1e-5, torch_dtype="float32", **shape)


def successor_map(vocab_size: int, seed: int) -> list[int]:
    """f(t): the token the planted bigram prefers after t. Never a special token."""
    rng = random.Random(seed)
    first = len(SPECIAL_TOKENS)
    return [rng.randrange(first, vocab_size) for _ in range(vocab_size)]


def _plant_bigram(model: Any, successor: list[int]) -> None:
    """Make the logits peak at f(last token) with height BIGRAM_LOGIT.

    Embeddings are random vectors u_t (RMS 1); lm_head row j is (S/d)·Σ_{t: f(t)=j} u_t, so after
    the final RMSNorm the logit of f(t) is ≈ S and every other logit is noise of size S/√d. The
    layers keep HF's small init, so they perturb but do not overturn the bigram. Target and
    drafter share f, so greedy decoding agrees (a drafter that accepts), and temperature T
    lowers acceptance smoothly: P(f(t)) ≈ e^{S/T} / (e^{S/T} + V).
    """
    import torch

    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    d = emb.shape[1]
    g = torch.Generator().manual_seed(BIGRAM_SEED)
    u = torch.randn(emb.shape[0], d, generator=g)
    w = torch.zeros_like(head)
    w.index_add_(0, torch.tensor(successor), u * (BIGRAM_LOGIT / d))
    with torch.no_grad():
        emb.copy_(u)
        head.copy_(w)
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(LAYER_OUTPUT_SCALE)


def _save_model(out: Path, tokenizer: Any, shape: dict[str, Any], seed: int) -> None:
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = _llama_config(tokenizer.get_vocab_size(), shape)
    model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    _plant_bigram(model, successor_map(tokenizer.get_vocab_size(), BIGRAM_SEED))
    model.save_pretrained(out, safe_serialization=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",  # type: ignore[no-untyped-call]
                                   unk_token="<unk>")
    fast.model_max_length = MAX_POSITION_EMBEDDINGS
    fast.save_pretrained(out)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}))
    add_chat_template(out)


def add_chat_template(model_dir: Path) -> bool:
    """Save CHAT_TEMPLATE beside the tokenizer (chat_template.jinja, where transformers looks)
    unless the model has a template already; True if it wrote one."""
    config = model_dir / "tokenizer_config.json"
    has_one = (model_dir / "chat_template.jinja").exists() or (
        config.exists() and "chat_template" in json.loads(config.read_text()))
    if not has_one:
        write_atomic(model_dir / "chat_template.jinja", CHAT_TEMPLATE)
    return not has_one


def build(out_dir: Path, seed: int = 0, force: bool = False) -> ModelPaths:
    """Write target and drafter under out_dir (skipped when both already exist, unless force)."""
    paths = ModelPaths(target=out_dir / f"tiny-llama-s{seed}",
                       drafter=out_dir / f"tiny-llama-s{seed}-drafter")
    done = all((p / "model.safetensors").exists() and (p / "tokenizer.json").exists()
               for p in (paths.target, paths.drafter))
    if done and not force:
        for path in (paths.target, paths.drafter):  # cached before the template existed
            add_chat_template(path)
        return paths
    tokenizer = _train_tokenizer(seed)
    _save_model(paths.target, tokenizer, TARGET_SHAPE, seed)
    _save_model(paths.drafter, tokenizer, DRAFTER_SHAPE, seed + 1)
    return paths
