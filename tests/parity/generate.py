"""Random-weight tiny models of every architecture seer supports, with goldens from Hugging Face
transformers (eager attention, fp32): the residual stream after the embeddings and after every
decoder layer (captured with forward hooks, before the final norm), the last entry of
output_hidden_states (after the final norm) and the logits.

Run with the project venv (make bench-setup installs torch + transformers):
    .venv/bin/python tests/parity/generate.py [OUT_DIR] [--only NAME,...]
OUT_DIR defaults to tests/parity/models; `make parity` writes to a temporary directory and
compares seer against it live. Each model: OUT_DIR/<name>/{config.json, model.safetensors,
golden.safetensors}. Sizes are odd on purpose (GQA, head_dim != hidden/heads, vocab 97), and
sequences are longer than every sliding window.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

SEQ = 20  # >= 16: the prefill GEMM path where it starts at 16 (test_parity.lua also forces it)
COMMON = dict(vocab_size=97, hidden_size=48, intermediate_size=100, num_hidden_layers=3,
              num_attention_heads=6, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)

# name -> (model_type, config overrides). Each name is one case of tests/parity.
MODELS = {
    "llama": ("llama", dict(tie_word_embeddings=False, rope_theta=500.0, rms_norm_eps=1e-5,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "llama_tied_bias": ("llama", dict(tie_word_embeddings=True, attention_bias=True, num_key_value_heads=3,
                                      head_dim=12, rope_theta=10000.0)),
    "mistral": ("mistral", dict(sliding_window=5, tie_word_embeddings=False)),
    "qwen2": ("qwen2", dict(tie_word_embeddings=True, use_sliding_window=False)),
    "qwen3": ("qwen3", dict(tie_word_embeddings=False, attention_bias=False)),
    "gemma": ("gemma", dict(hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)),
    "gemma2": ("gemma2", dict(sliding_window=5, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                              query_pre_attn_scalar=10, hidden_activation="gelu_pytorch_tanh")),
    "gemma3": ("gemma3_text", dict(sliding_window=5, query_pre_attn_scalar=10, rope_local_base_freq=100.0,
                                   rope_theta=1000.0, layer_types=["sliding_attention", "full_attention",
                                                                   "sliding_attention"])),
    "gpt2": ("gpt2", dict(n_embd=48, n_head=6, n_layer=3, n_positions=64, vocab_size=97, n_inner=100,
                          activation_function="gelu_new")),
    "gpt_neox": ("gpt_neox", dict(rotary_pct=0.5, use_parallel_residual=True, hidden_act="gelu",
                                  num_key_value_heads=6)),
    # Llama's mlp_bias (gate/up/down biases), which seer once ignored without a word.
    "llama_mlp_bias": ("llama", dict(mlp_bias=True, attention_bias=True, tie_word_embeddings=False)),
    # RoPE scaling types of long-context configs (Qwen 2.5): yarn (with its attention factor on cos
    # and sin) and dynamic NTK (the base grows past max_position_embeddings: 12 < SEQ)
    "qwen2_yarn": ("qwen2", dict(tie_word_embeddings=True, use_sliding_window=False,
                                 rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                               "original_max_position_embeddings": 16})),
    "llama_dynamic": ("llama", dict(tie_word_embeddings=False, max_position_embeddings=12,
                                    rope_scaling={"rope_type": "dynamic", "factor": 2.0})),
    # Granite: the Llama decoder with embedding/residual/attention multipliers and logits scaling
    "granite": ("granite", dict(tie_word_embeddings=True, embedding_multiplier=3.0, residual_multiplier=0.5,
                                attention_multiplier=0.2, logits_scaling=4.0, attention_bias=True)),
    # OLMo 2: q/k norms over the whole projection, norms after each block
    "olmo2": ("olmo2", dict(tie_word_embeddings=False, rms_norm_eps=1e-6)),
    # Phi-3 / Phi-4-mini: fused qkv and gate_up, partial rotary, longrope (SEQ = 20 > 16: the long
    # factors; phi3_short stays within original_max_position_embeddings: the short ones)
    "phi3": ("phi3", dict(tie_word_embeddings=False, partial_rotary_factor=0.75, max_position_embeddings=64,
                          original_max_position_embeddings=16,
                          rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3],
                                        "long_factor": [1.5, 2.5, 4.0], "original_max_position_embeddings": 16})),
    "phi3_short": ("phi3", dict(tie_word_embeddings=True, partial_rotary_factor=0.75, max_position_embeddings=64,
                                original_max_position_embeddings=32, sliding_window=7,
                                rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.7],
                                              "long_factor": [2.0, 3.0, 5.0], "original_max_position_embeddings": 32})),
    # Gemma 3 multimodal checkpoints (model_type gemma3, text_config, weights under a language-model
    # prefix, a vision tower seer skips): the goldens are the text model's.
    "gemma3_multimodal": ("gemma3", dict()),
    "gemma3_multimodal_v5names": ("gemma3", dict(_v5_names=True)),
    # Gemma 3 stores attn_logit_softcapping but transformers does not apply it; the final cap is.
    "gemma3_softcap": ("gemma3_text", dict(sliding_window=5, query_pre_attn_scalar=10, attn_logit_softcapping=5.0,
                                           final_logit_softcapping=3.0,
                                           layer_types=["sliding_attention", "full_attention", "sliding_attention"])),
}

# bf16 checkpoints: the same configurations with widths that are multiples of 32 (so prefill goes
# through the AMX kernel where the CPU has one), weights rounded to bf16 and saved in bf16; the
# goldens are transformers' fp32 forward on those rounded weights, so the bar (1e-4) measures
# seer's bf16-weight arithmetic, not the rounding of the weights.
BF16_WIDTHS = dict(hidden_size=64, intermediate_size=128, head_dim=16, num_attention_heads=4, num_key_value_heads=2)
BF16 = ["llama", "llama_tied_bias", "llama_mlp_bias", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
        "gpt2", "gpt_neox"]
for _name in BF16:
    _mt, _ov = MODELS[_name]
    _ov = dict(_ov, **BF16_WIDTHS)
    if _mt == "gpt2":
        _ov = dict(MODELS[_name][1], n_embd=64, n_inner=128, n_head=4)
    elif _mt == "gpt_neox":
        _ov = dict(MODELS[_name][1], hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4)
    MODELS[_name + "_bf16"] = (_mt, dict(_ov, _bf16=True))


def config_for(model_type, overrides):
    kw = dict(COMMON)
    if model_type == "gpt2":
        kw = {k: v for k, v in kw.items() if k in ("bos_token_id", "eos_token_id")}
    if model_type == "gpt_neox":
        kw.pop("head_dim")
    kw.update(overrides)
    return AutoConfig.for_model(model_type, **kw)


def randomize(model, seed):
    # Large enough weights that every layer matters (transformers' init is tiny); norm weights
    # near 1 (near 0 for Gemma's (1 + w) norms) but not equal, so their handling is tested.
    g = torch.Generator().manual_seed(seed)
    gemma = model.config.model_type.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_((0.0 if gemma and name.endswith("weight") else 1.0) * (name.endswith("weight")) + 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.2 * noise)


def layers_of(model):
    base = getattr(model, "model", None) or getattr(model, "transformer", None) or getattr(model, "gpt_neox", None)
    base = getattr(base, "language_model", None) or base  # a multimodal model's text model
    for attr in ("layers", "h"):
        if hasattr(base, attr):
            return getattr(base, attr)
    raise RuntimeError("cannot find the decoder layers")


def multimodal_gemma3_config():
    """A Gemma 3 multimodal config (model_type gemma3) around the gemma3 parity text config, with
    a one-layer SigLIP vision tower; saved, its text_config leaves out fields at their default."""
    from transformers import Gemma3Config, SiglipVisionConfig
    text = config_for("gemma3_text", MODELS["gemma3"][1])
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    return Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
                        eos_token_id=[2, 5])


def generate(name, out_dir):
    model_type, overrides = MODELS[name]
    overrides = dict(overrides)
    bf16 = overrides.pop("_bf16", False)
    v5_names = overrides.pop("_v5_names", False)
    torch.manual_seed(0)
    if model_type == "gemma3":
        from transformers import Gemma3ForConditionalGeneration
        config = multimodal_gemma3_config()
        model = Gemma3ForConditionalGeneration._from_config(config, attn_implementation="eager",
                                                            dtype=torch.float32).eval()
        config = config.text_config  # for vocab_size below
    else:
        config = config_for(model_type, overrides)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32).eval()
    randomize(model, seed=sum(map(ord, name)))
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    if bf16:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
        # a copy: casting the model itself would round its buffers too (RoPE's inv_freq)
        __import__("copy").deepcopy(model).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    else:
        model.save_pretrained(d, safe_serialization=True)
    if v5_names:
        # transformers 5 saves the hub layout (language_model.model.*, vision_tower.*, ...); this
        # variant has the names of its modules instead (model.language_model.*, lm_head.*)
        from safetensors.torch import load_file
        f = os.path.join(d, "model.safetensors")
        t = load_file(f)
        ren = {}
        for k, v in t.items():
            if k.startswith("language_model.model."):
                k = "model.language_model." + k[len("language_model.model."):]
            elif k.startswith("language_model.lm_head."):
                k = k[len("language_model."):]
            else:
                k = "model." + k
            ren[k] = v.contiguous()
        save_file(ren, f, metadata={"format": "pt"})
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, config.vocab_size, (1, SEQ), generator=g)
    tokens[0, 0] = 1
    captured = {}
    hooks = []
    layers = layers_of(model)
    hooks.append(layers[0].register_forward_pre_hook(
        lambda mod, args, kwargs: captured.__setitem__(0, (kwargs.get("hidden_states", args[0] if args else None)).detach().clone()),
        with_kwargs=True))
    for i, layer in enumerate(layers):
        def hook(mod, args, out, i=i):
            t = out[0] if isinstance(out, tuple) else out
            captured[i + 1] = t.detach().clone()
        hooks.append(layer.register_forward_hook(hook))
    with torch.no_grad():
        out = model(tokens, output_hidden_states=True)
        logits = out.logits
    for h in hooks:
        h.remove()
    tensors = {"tokens": tokens[0].to(torch.int64).contiguous(), "logits": logits[0].contiguous()}
    # transformers' own output_hidden_states: the last entry has the final norm applied (seer's
    # forward{hidden_states = true} matches it; the hooks above give the residuals before it)
    hs = out.hidden_states if getattr(out, "hidden_states", None) is not None else None
    if hs is not None:
        tensors["hidden_states.last"] = hs[-1][0].contiguous()
    for i, t in captured.items():
        tensors[f"hidden.{i}"] = t[0].contiguous()
    save_file(tensors, os.path.join(d, "golden.safetensors"),
              metadata={"transformers": __import__("transformers").__version__, "torch": torch.__version__,
                        "model_type": model_type})
    return d


def main():
    args = [a for i, a in enumerate(sys.argv[1:]) if not a.startswith("--") and sys.argv[i] != "--only"]
    out_dir = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    only = None
    if "--only" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1].split(",")
    for name in MODELS:
        if only and name not in only:
            continue
        try:
            d = generate(name, out_dir)
            print(f"ok   {name}: {d}")
        except Exception as e:  # a model type this transformers version lacks is reported, not fatal
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            sys.exit(1)


if __name__ == "__main__":
    main()
