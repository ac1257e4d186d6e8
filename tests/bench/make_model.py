"""Writes the random-weight ~0.5B Llama-shaped model that `make bench` measures, in f32 and
bf16, with transformers' own save_pretrained (so both sides read the same files).
Usage: .venv/bin/python tests/bench/make_model.py OUT_DIR   (creates OUT_DIR/f32 and OUT_DIR/bf16)"""
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=36,
                     num_attention_heads=16, num_key_value_heads=4, head_dim=64, max_position_embeddings=2048,
                     rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1,
                     eos_token_id=2)
torch.manual_seed(0)
with torch.device("cpu"):
    model = LlamaForCausalLM(config).to(torch.float32)
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0.0, 0.02)
n = sum(p.numel() for p in model.parameters())
for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
    d = os.path.join(out, name)
    model.to(dtype).save_pretrained(d, safe_serialization=True, max_shard_size="1GB")
    print(f"{d}: {n / 1e6:.0f}M parameters, {name}")
