"""Measures what seer's AMX prefill arithmetic does to the bf16 parity models, in transformers:
every linear layer's input is replaced by its first k bf16 pieces (k = 1: precision = "fast", x
rounded to bf16 as torch's bf16 matmul; k = 2: the former default, hi + lo; k = 3: the default,
exact). Prints the max abs logits difference against the fp32 goldens (docs/model.md quotes it).
    .venv/bin/python tests/parity/bf16_pieces.py llama_bf16 qwen3_bf16 ..."""
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from transformers.pytorch_utils import Conv1D
def pieces(x, k):
    out = torch.zeros_like(x); r = x.clone()
    for _ in range(k):
        p = r.to(torch.bfloat16).to(torch.float32); out = out + p; r = r - p
    return out
for name in sys.argv[1:]:
    d = f"tests/parity/models/{name}"
    g = load_file(f"{d}/golden.safetensors")
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    res = []
    for k in (1, 2, 3):
        hs = [mod.register_forward_pre_hook(lambda mod, a, k=k: (pieces(a[0], k),) + tuple(a[1:]))
              for mod in m.modules() if isinstance(mod, (torch.nn.Linear, Conv1D))]
        with torch.no_grad(): lg = m(g["tokens"][None]).logits[0]
        for h in hs: h.remove()
        res.append((lg - g["logits"]).abs().max().item())
    print(f"{name:22s} 1 piece (fast) {res[0]:.2e}   2 pieces (old) {res[1]:.2e}   3 pieces {res[2]:.2e}")
