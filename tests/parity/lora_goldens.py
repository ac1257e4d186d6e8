"""Random LoRA adapters (PEFT format) on the tiny parity models, with goldens from peft +
transformers (eager attention, fp32): the logits of the parity sequence with the adapter
enabled (unmerged PeftModel), merged (merge_and_unload) and disabled (disable_adapter()).

Run with the project venv (make bench-setup installs torch, transformers and peft):
    .venv/bin/python tests/parity/lora_goldens.py [OUT_DIR] [--models DIR]
OUT_DIR defaults to tests/parity/lora, DIR (the base models, made by generate.py) to
tests/parity/models; `make parity` writes both to a temporary directory and compares seer
against them live. Each case: OUT_DIR/<case>/{adapter_config.json, adapter_model.safetensors,
golden.safetensors}; adapter_config.json's base_model_name_or_path is the base model's folder
name under DIR. golden.safetensors holds tokens (the base model's golden sequence) and
logits.enabled, logits.merged, logits.disabled.
"""
import os
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# case -> (base parity model, LoraConfig arguments)
CASES = {
    "llama_all": ("llama", dict(r=4, lora_alpha=8, target_modules=ALL)),
    "gemma2_all": ("gemma2", dict(r=4, lora_alpha=8, target_modules=ALL)),
    # A subset of modules on some layers only, rank-stabilised scaling (alpha / sqrt(r)).
    "qwen3_rslora": ("qwen3", dict(r=6, lora_alpha=5, use_rslora=True, target_modules=["q_proj", "v_proj", "down_proj"],
                                   layers_to_transform=[0, 2])),
}


def randomize_lora(model, seed):
    # peft initialises B to zero (the adapter would be the identity); random A and B make every
    # adapted module matter.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def generate(case, out_dir, models_dir):
    base, kw = CASES[case]
    base_dir = os.path.join(models_dir, base)
    tokens = load_file(os.path.join(base_dir, "golden.safetensors"))["tokens"].unsqueeze(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        base_logits = model(tokens).logits[0].clone()
    config = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, bias="none", **kw)
    peft_model = get_peft_model(model, config).eval()
    randomize_lora(peft_model, seed=sum(map(ord, case)))
    with torch.no_grad():
        enabled = peft_model(tokens).logits[0].clone()
        with peft_model.disable_adapter():
            disabled = peft_model(tokens).logits[0].clone()
    d = os.path.join(out_dir, case)
    os.makedirs(d, exist_ok=True)
    peft_model.peft_config["default"].base_model_name_or_path = base
    peft_model.save_pretrained(d, safe_serialization=True, save_embedding_layers=False)
    readme = os.path.join(d, "README.md")  # peft's model-card stub
    if os.path.exists(readme):
        os.remove(readme)
    merged_model = peft_model.merge_and_unload()
    with torch.no_grad():
        merged = merged_model(tokens).logits[0].clone()
    assert (disabled - base_logits).abs().max() == 0, "disable_adapter() is not the base model"
    delta = (enabled - disabled).abs().max().item()
    assert delta > 0.1, f"the adapter barely changes the logits ({delta})"
    save_file({"tokens": tokens[0].to(torch.int64).contiguous(), "logits.enabled": enabled.contiguous(),
               "logits.merged": merged.contiguous(), "logits.disabled": disabled.contiguous()},
              os.path.join(d, "golden.safetensors"),
              metadata={"peft": __import__("peft").__version__, "transformers": __import__("transformers").__version__,
                        "torch": torch.__version__, "base": base})
    return d, delta, (enabled - merged).abs().max().item()


def main():
    args = sys.argv[1:]
    models_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    if "--models" in args:
        i = args.index("--models")
        models_dir = args[i + 1]
        del args[i:i + 2]
    out_dir = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "lora")
    torch.manual_seed(0)
    for case in CASES:
        try:
            d, delta, merge_err = generate(case, out_dir, models_dir)
            print(f"ok   lora {case}: {d} (adapter moves logits by {delta:.3f}; peft merged vs unmerged {merge_err:.2e})")
        except Exception as e:
            print(f"FAIL lora {case}: {type(e).__name__}: {e}")
            sys.exit(1)


if __name__ == "__main__":
    main()
