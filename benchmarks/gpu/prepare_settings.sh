#!/bin/bash
# Run here (not on the GPU machine), after `bash ../shared/gpu/prepare.sh` built .gpu/ (its model/
# holds the tokenizer and the Llama-3.2-3B-shaped config). Adds what the other GPU settings need:
#   .gpu/moe30b/           Qwen3-30B-A3B-shaped config (48 layers, 128 experts, top-8, d=2048) +
#                          the same tokenizer; dummy weights at serve time
#   .gpu/model/eagle3/     a one-layer EAGLE-3 drafter config for the 3B target (V2 runner: 0.26's
#                          V2 refuses draft_model and ngram, it runs eagle/eagle3/mtp only)
#   .gpu/model32/eagle3/   the same head at the 32B target's width (hidden 5120, 40 heads, 8 KV
#                          heads, head_dim 128, intermediate 27648: read from model32's config)
#   .gpu/moe30b/eagle3/    the same head at the MoE target's width (hidden 2048, 32 heads)
#   .gpu/moe_kernels.xz    vLLM's MoE kernels (_moe_C_stable_libtorch.abi3.so, 47 MB -> 40 MB),
#                          which prepare.sh leaves out of the tarball; too large beside the tree,
#   .gpu/m1, .gpu/m2       so carried in two halves (h200.sh's moe-kernels stage joins them)
#   .gpu/c1, .gpu/c2, ...  re-split so that each chunk plus the working tree fits the 64 MiB a
#                          call carries (as many chunks as that takes: four at a 30-MB tree)
set -euo pipefail
S=$(git rev-parse --show-toplevel); G=$S/.gpu
[ -f "$G/model/config.json" ] || { echo "run bash ../shared/gpu/prepare.sh first (no $G/model)"; exit 1; }
[ -f "$G/model32/config.json" ] || { echo "run bash ../shared/gpu/prepare.sh first (no $G/model32)"; exit 1; }
mkdir -p "$G/moe30b" "$G/model/eagle3" "$G/model32/eagle3" "$G/moe30b/eagle3"
# drafter heads carry no tokenizer.json of their own (2.3 MB each against a 64-MiB carry):
# h200.sh's install stage copies the target's beside them on the device
cp "$G"/model/tokenizer*.json "$G/model/generation_config.json" "$G/moe30b/"
for d in model/eagle3 model32/eagle3 moe30b/eagle3 model/drafter; do
  cp "$G/model/tokenizer_config.json" "$G/model/generation_config.json" "$G/$d/"
  rm -f "$G/$d/tokenizer.json"
done
python3 - "$G" <<'EOF'
import json, sys
G = sys.argv[1]
base = json.load(open(f"{G}/model/config.json"))
vocab = base["vocab_size"]  # our locally trained tokenizer (Qwen3's real vocab is 151936)
moe = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_act="silu",
           hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
           num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
           num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
           mlp_only_layers=[], attention_bias=False, attention_dropout=0.0, rms_norm_eps=1e-6,
           rope_theta=1000000.0, rope_scaling=None, max_position_embeddings=40960,
           max_window_layers=48, use_sliding_window=False, sliding_window=None,
           tie_word_embeddings=False, torch_dtype="bfloat16", use_cache=True,
           output_router_logits=False, router_aux_loss_coef=0.001, initializer_range=0.02,
           bos_token_id=base["bos_token_id"], eos_token_id=base["eos_token_id"], vocab_size=vocab)
json.dump(moe, open(f"{G}/moe30b/config.json", "w"), indent=1)
# EAGLE-3 heads for the 3B, the 32B and the MoE target: one decoder layer at the target's width, full
# draft vocab (draft_vocab_size == vocab_size keeps d2t at zeros = identity under dummy weights)
def eagle3(target):
    t = json.load(open(f"{G}/{target}/config.json"))
    head = {k: t[k] for k in ("hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
                              "max_position_embeddings", "bos_token_id", "eos_token_id",
                              "num_attention_heads", "num_key_value_heads", "head_dim",
                              "hidden_size", "intermediate_size", "vocab_size")}
    head.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
                draft_vocab_size=t["vocab_size"], tie_word_embeddings=False,
                torch_dtype="bfloat16", attention_bias=False, mlp_bias=False,
                initializer_range=0.02)
    json.dump(head, open(f"{G}/{target}/eagle3/config.json", "w"), indent=1)
    return f"{target}/eagle3 (hidden {head['hidden_size']}, {head['num_attention_heads']} heads)"
print("configs: moe30b,", eagle3("model") + ",", eagle3("model32") + ",", eagle3("moe30b"))
EOF
if [ ! -f "$G/moe_kernels.xz" ]; then
  W=$(ls "$G"/dl/vllm-0.26.0-*.whl)
  unzip -p "$W" vllm/_moe_C_stable_libtorch.abi3.so | xz -6 -T0 > "$G/moe_kernels.xz"
fi
(cd "$G" && rm -f m? && split -n 2 -a 1 moe_kernels.xz mpart_ && mv mpart_a m1 && mv mpart_b m2)
ls -la "$G/moe_kernels.xz" "$G/m1" "$G/m2"; du -sh "$G/moe30b" "$G/model" "$G/model32"
# each chunk + the working tree (+ 5 MB for bin/, a target's config and tokenizer, .whl)
# must stay under the 64 MiB a call carries: as many equal chunks c1, c2, c3... as that takes
TREE=$(cd "$S" && git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
ROOM=$(( 67108864 - TREE - 5000000 )); SIZE=$(stat -c %s "$G/site.tar.xz")
N=$(( (SIZE + ROOM - 1) / ROOM )); CHUNK=$(( (SIZE + N - 1) / N ))
if [ ! -f "$G/c$N" ] || [ -f "$G/c$((N + 1))" ] || [ "$(stat -c %s "$G/c1")" -ne "$CHUNK" ]; then
  (cd "$G" && rm -f c? && split -b "$CHUNK" -a 1 site.tar.xz part_ \
     && i=1 && for f in part_?; do mv "$f" "c$i"; i=$((i + 1)); done)
fi
echo "working tree $TREE bytes: $N chunks of $CHUNK (one a call, with .gpu/bin)"; ls -la "$G"/c?
