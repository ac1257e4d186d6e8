"""make bench-gpu's peer: transformers (bf16, eager and sdpa attention) on random-weight models
shaped like Gemma-2-2B and Gemma-2-9B, measured the way tests/bench/gpu_bench.c measures seer:
greedy decode at batch 1 after a 128-token prompt (tokens/s over 128 steps, KV cache on) and a
2048-token prefill (best of 3 after a warm-up). Prints 'skipped: ...' and exits 0 without torch
or a GPU."""
import sys
import time

try:
    import torch
    from transformers import Gemma2Config, Gemma2ForCausalLM
except Exception as e:  # noqa: BLE001 - any import failure means no peer here
    print(f"transformers peer: skipped: {e}")
    sys.exit(0)
if not torch.cuda.is_available():
    print("transformers peer: skipped: torch sees no GPU")
    sys.exit(0)

SHAPES = {
    "Gemma-2-2B": dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
                       num_key_value_heads=4),
    "Gemma-2-9B": dict(hidden_size=3584, intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16,
                       num_key_value_heads=8),
}


def sync():
    torch.cuda.synchronize()


@torch.no_grad()
def bench(name, shape, attn):
    cfg = Gemma2Config(head_dim=256, vocab_size=256000, sliding_window=4096, query_pre_attn_scalar=256,
                       attn_logit_softcapping=50.0, final_logit_softcapping=30.0, max_position_embeddings=8192,
                       **shape)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    # built in bf16 directly on the GPU (random init there: seconds, where building in f32 on
    # the CPU and moving took most of a minute per model)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Gemma2ForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    ids = torch.randint(0, cfg.vocab_size, (1, 128), device="cuda")
    out = model(ids, use_cache=True)
    past = out.past_key_values
    nxt = out.logits[:, -1:].argmax(-1)
    for _ in range(4):
        out = model(nxt, past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    sync()
    t0 = time.perf_counter()
    for _ in range(128):
        out = model(nxt, past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    sync()
    dec = 128 / (time.perf_counter() - t0)
    ids = torch.randint(0, cfg.vocab_size, (1, 2048), device="cuda")
    best = 1e30
    for r in range(4):
        sync()
        t0 = time.perf_counter()
        model.model(ids, use_cache=False)
        sync()
        if r > 0:
            best = min(best, time.perf_counter() - t0)
    print(f"  transformers {attn:5s} decode {dec:.1f} tok/s, prefill 2048 tok {2048 / best:.0f} tok/s")
    del model
    torch.cuda.empty_cache()


which = sys.argv[1] if len(sys.argv) > 1 else "all"
print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}")
for name, shape in SHAPES.items():
    if which != "all" and which.upper() not in name:
        continue
    print(name)
    for attn in ("eager", "sdpa"):
        bench(name, shape, attn)
