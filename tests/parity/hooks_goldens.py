"""Goldens for hooked forward passes: the parity models of tests/parity/models run through Hugging
Face transformers (eager attention, fp32) with torch forward hooks that do what seer's hook points
and interventions (docs/hooks.md) do: steering additions, directional ablation, activation
patching, zeroed heads, scaled MLP activations, and a capture of every hook point of layer 1.

The cases are described once, in tests/parity/hooks_cases.json (seer's hook names, positions,
strengths); this script maps each seer hook point to the module whose input or output it is and
writes OUT_DIR/<name>/hooks.safetensors for every model in OUT_DIR (made by generate.py):
    .venv/bin/python tests/parity/hooks_goldens.py [OUT_DIR] [--only NAME,...]
OUT_DIR defaults to tests/parity/models; `make parity` regenerates into a temporary directory.
tests/lua/test_hooks_parity.lua compares seer against the files.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = json.load(open(os.path.join(HERE, "hooks_cases.json")))


# ---- where each seer hook point is in a transformers model ----------------------------------------

class Arch:
    """The modules of one decoder layer that seer's hook points read or rewrite."""

    def __init__(self, model):
        self.model = model
        self.type = model.config.model_type
        self.gpt2 = self.type == "gpt2"
        self.neox = self.type == "gpt_neox"
        self.sandwich = self.type in ("gemma2", "gemma3_text")  # post-attention and post-MLP norms
        base = getattr(model, "model", None) or getattr(model, "transformer", None) or model.gpt_neox
        self.base = base
        self.layers = base.h if self.gpt2 else base.layers
        self.final_norm = base.ln_f if self.gpt2 else (base.final_layer_norm if self.neox else base.norm)
        cfg = model.config
        self.n_heads = cfg.num_attention_heads
        self.d_model = cfg.hidden_size
        if self.gpt2 or self.neox:  # no GQA, d_head = d_model / heads
            self.d_head = cfg.hidden_size // cfg.num_attention_heads
            self.n_kv = self.n_heads
        else:
            self.d_head = cfg.head_dim
            self.n_kv = cfg.num_key_value_heads
        self.parallel = self.neox and cfg.use_parallel_residual

    def attn(self, i):
        layer = self.layers[i]
        return layer.attn if self.gpt2 else (layer.attention if self.neox else layer.self_attn)

    def o_proj(self, i):
        a = self.attn(i)
        return a.c_proj if self.gpt2 else (a.dense if self.neox else a.o_proj)

    def ln1(self, i):
        return self.layers[i].ln_1 if self.gpt2 else self.layers[i].input_layernorm

    def ln2(self, i):
        layer = self.layers[i]
        if self.gpt2:
            return layer.ln_2
        return layer.pre_feedforward_layernorm if self.sandwich else layer.post_attention_layernorm

    def attn_out(self, i):
        return self.layers[i].post_attention_layernorm if self.sandwich else self.o_proj(i)

    def mlp(self, i):
        return self.layers[i].mlp

    def mlp_in(self, i):
        m = self.mlp(i)
        return m.c_fc if self.gpt2 else (m.dense_h_to_4h if self.neox else m.gate_proj)

    def mlp_down(self, i):
        m = self.mlp(i)
        return m.c_proj if self.gpt2 else (m.dense_4h_to_h if self.neox else m.down_proj)

    def mlp_out(self, i):
        return self.layers[i].post_feedforward_layernorm if self.sandwich else self.mlp(i)

    def qkv(self, i, which):
        """(module, where, to_heads, from_heads) for hook_q / hook_k / hook_v of layer i: the
        module output holding them and maps between its row [width] and [heads, d_head]."""
        a, n_h, dh = self.attn(i), (self.n_heads if which == "q" else self.n_kv), self.d_head
        if self.gpt2:  # c_attn: [q | k | v], each d_model wide
            lo = "qkv".index(which) * self.d_model
            return a.c_attn, "out", (lambda x: x[:, lo:lo + n_h * dh].reshape(-1, n_h, dh)), \
                (lambda x, y: torch.cat([x[:, :lo], y.reshape(y.shape[0], -1), x[:, lo + n_h * dh:]], 1))
        if self.neox:  # query_key_value: per head [q | k | v], each d_head wide
            lo = "qkv".index(which) * dh

            def put(x, y):
                z = x.reshape(x.shape[0], n_h, 3 * dh).clone()
                z[:, :, lo:lo + dh] = y
                return z.reshape(x.shape)
            return a.query_key_value, "out", (lambda x: x.reshape(-1, n_h, 3 * dh)[:, :, lo:lo + dh]), put
        if which != "v" and hasattr(a, "q_norm"):  # Qwen3 / Gemma 3: after the per-head norm
            norm = a.q_norm if which == "q" else a.k_norm
            if self.type == "gemma3_text":  # normalizes [batch, head, pos, d_head]
                return norm, "out", (lambda x: x.transpose(0, 1)), (lambda x, y: y.transpose(0, 1))
            return norm, "out", (lambda x: x), (lambda x, y: y)  # Qwen3: [batch, pos, head, d_head]
        proj = getattr(a, which + "_proj")
        return proj, "out", (lambda x: x.reshape(-1, n_h, dh)), (lambda x, y: y.reshape(x.shape))

    def point(self, name):
        """(module, where, to_view, from_view) for a seer hook point: the module whose first input
        ("in") or (first) output ("out") it is, and maps from that tensor (batch row) to seer's
        [pos, ...] view of the point and back."""
        same = (lambda x: x), (lambda x, y: y)
        if name == "ln_final.hook_normalized":
            return (self.final_norm, "out") + same
        if name == "hook_pos_embed" and self.gpt2:
            return (self.base.wpe, "out") + same
        parts = name.split(".")
        if parts[0] != "blocks":
            raise KeyError(name)
        i, rest = int(parts[1]), ".".join(parts[2:])
        if rest in ("attn.hook_q", "attn.hook_k", "attn.hook_v"):
            return self.qkv(i, rest[-1])
        if rest == "attn.hook_z":
            H, dh = self.n_heads, self.d_head
            return self.o_proj(i), "in", (lambda x: x.reshape(-1, H, dh)), (lambda x, y: y.reshape(x.shape))
        table = {
            "hook_resid_pre": (self.layers[i], "in"),
            "hook_resid_post": (self.layers[i], "out"),
            "ln1.hook_normalized": (self.ln1(i), "out"),
            "hook_attn_out": (self.attn_out(i), "out"),
            "ln2.hook_normalized": (self.ln2(i), "out"),
            "mlp.hook_pre": (self.mlp_in(i), "out"),
            "mlp.hook_post": (self.mlp_down(i), "in"),
            "hook_mlp_out": (self.mlp_out(i), "out"),
        }
        if not self.parallel:
            table["hook_resid_mid"] = (self.ln2(i), "in")
        if rest not in table:
            raise KeyError(name)
        return table[rest] + same

    def layer_names(self, pattern):
        """seer names of the form blocks.<i>.<pattern> for every layer (pattern ends in '$')."""
        suffix = pattern.rstrip("$")
        return [f"blocks.{i}.{suffix}" for i in range(len(self.layers))]


def hook(point, fn):
    """Registers fn(x) -> replacement or None at a hook point (Arch.point), x the point's
    [pos, ...] activation (batch 1). Returns the handle."""
    module, where, view, unview = point

    def apply(t):
        new = fn(view(t[0]))
        return None if new is None else unview(t[0], new).unsqueeze(0)

    if where == "in":
        def pre(mod, args, kwargs):
            if args:
                new = apply(args[0])
                return None if new is None else ((new,) + tuple(args[1:]), kwargs)
            new = apply(kwargs["hidden_states"])
            return None if new is None else (args, dict(kwargs, hidden_states=new))
        return module.register_forward_pre_hook(pre, with_kwargs=True)

    def post(mod, args, out):
        new = apply(out[0] if isinstance(out, tuple) else out)
        if new is None:
            return None
        return (new,) + tuple(out[1:]) if isinstance(out, tuple) else new
    return module.register_forward_hook(post)


# ---- the interventions, as seer defines them ------------------------------------------------------

def selected(case, n):
    """Boolean mask of the positions a case acts on (positions / from / to options)."""
    mask = torch.ones(n, dtype=torch.bool)
    if "positions" in case:
        mask = torch.zeros(n, dtype=torch.bool)
        for p in case["positions"]:
            mask[p if p >= 0 else n + p] = True
    if "from" in case:
        mask[: case["from"]] = False
    if "to" in case:
        mask[case["to"]:] = False
    return mask


def intervention(case, tensors, n, clean=None):
    """fn(x [pos, ...]) -> new x, for one case."""
    rows = selected(case, n)
    kind = case["kind"]

    def where(x, y):
        m = rows.view(n, *([1] * (x.dim() - 1)))
        return torch.where(m, y, x)
    if kind == "add":
        v = tensors[case["vec"]]
        return lambda x: where(x, x + case["strength"] * v)
    if kind == "ablate":
        d = tensors[case["dir"]]
        d = d / d.norm()
        return lambda x: where(x, x - (x @ d).unsqueeze(-1) * d)
    if kind == "replace":
        return lambda x: where(x, clean)
    if kind in ("scale", "zero_heads"):
        f = case["factor"] if kind == "scale" else 0.0
        heads = case.get("heads")

        def scale(x):
            y = x.clone()
            if heads is None:
                y[rows] *= f
            else:  # x: [pos, head, d_head]
                for h in heads:
                    y[rows, h] *= f
            return y
        return scale
    raise ValueError(kind)


# ---- running ---------------------------------------------------------------------------------------

def run_case(model, arch, ids, case, tensors, clean=None):
    """Logits and every layer's hook_resid_post (the value passed on) with the case's hooks."""
    fn = intervention(case, tensors, ids.shape[0], clean)
    names = arch.layer_names(case["hook"]) if case["hook"].endswith("$") else [case["hook"]]
    handles = [hook(arch.point(name), fn) for name in names]
    resid = {}
    for i in range(len(arch.layers)):  # registered after the intervention: sees its result
        handles.append(hook(arch.point(f"blocks.{i}.hook_resid_post"),
                            lambda x, i=i: resid.__setitem__(i, x.detach().clone())))
    try:
        with torch.no_grad():
            logits = model(ids.unsqueeze(0)).logits[0]
    finally:
        for h in handles:
            h.remove()
    return logits, resid


def capture(model, arch, ids, names):
    """{name: activation} for seer hook points, without intervening. Names the architecture does
    not have are left out."""
    got, handles = {}, []
    for name in names:
        if name == "hook_embed":  # the rows of the table, before Gemma's sqrt(d_model) scale
            got[name] = arch.model.get_input_embeddings().weight[ids].detach().clone()
        elif name.endswith("attn.hook_pattern"):  # eager attention returns its softmax weights
            handles.append(arch.attn(int(name.split(".")[1])).register_forward_hook(
                lambda mod, args, out, name=name: got.__setitem__(name, out[1][0].detach().clone())))
        else:
            try:
                point = arch.point(name)
            except KeyError:
                continue  # hook_pos_embed beside GPT-2, hook_resid_mid of parallel-residual GPT-NeoX
            handles.append(hook(point, lambda x, name=name: got.__setitem__(name, x.detach().clone())))
    try:
        with torch.no_grad():
            model(ids.unsqueeze(0))
    finally:
        for h in handles:
            h.remove()
    return {k: v.contiguous() for k, v in got.items()}


def check_capture(arch, got, golden):
    """The captured points add up: the residual stream of layer 1 is the parity golden's, and its
    pieces sum to it (so no hook sat on a module transformers no longer calls)."""
    def near(a, b, what):
        d = (a - b).abs().max().item()
        assert d < 1e-5, f"capture: {what} is off by {d:g}"
    c = {k[len("blocks.1."):]: v for k, v in got.items() if k.startswith("blocks.1.")}
    near(c["hook_resid_pre"], golden["hidden.1"], "blocks.1.hook_resid_pre")
    near(c["hook_resid_post"], golden["hidden.2"], "blocks.1.hook_resid_post")
    if arch.parallel:
        near(c["hook_resid_pre"] + c["hook_attn_out"] + c["hook_mlp_out"], c["hook_resid_post"], "pre + attn + mlp")
    else:
        near(c["hook_resid_pre"] + c["hook_attn_out"], c["hook_resid_mid"], "resid_pre + attn_out")
        near(c["hook_resid_mid"] + c["hook_mlp_out"], c["hook_resid_post"], "resid_mid + mlp_out")
    pattern, v = c["attn.hook_pattern"], c["attn.hook_v"]
    z = torch.einsum("hqk,khd->qhd", pattern, v.repeat_interleave(pattern.shape[0] // v.shape[1], dim=1))
    near(z, c["attn.hook_z"], "pattern @ v")


def generate(name, out_dir):
    d = os.path.join(out_dir, name)
    golden = load_file(os.path.join(d, "golden.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    arch = Arch(model)
    ids = golden["tokens"].to(torch.int64)
    n = ids.shape[0]
    assert n == CASES["seq_len"], (name, n)
    with torch.no_grad():
        plain = model(ids.unsqueeze(0)).logits[0]
    # the reloaded model is the one generate.py wrote the goldens with
    assert (plain - golden["logits"]).abs().max().item() < 1e-5, f"{name}: reloaded model differs from golden"

    tensors = {}
    for case in CASES["cases"]:
        cid = case["id"]
        for key in ("vec", "dir"):
            if key in case:
                g = torch.Generator().manual_seed(case["seed"])
                shape = (arch.n_kv, arch.d_head) if case.get("vec_shape") == "kv_heads" else (arch.d_model,)
                tensors[case[key]] = torch.randn(shape, generator=g)
        clean = None
        if case["kind"] == "replace":
            g = torch.Generator().manual_seed(case["clean_seed"])
            clean_ids = torch.randint(3, model.config.vocab_size, (n,), generator=g)
            clean_ids[0] = model.config.bos_token_id
            tensors[case["clean_ids"]] = clean_ids
            clean = capture(model, arch, clean_ids, [case["hook"]])[case["hook"]]
            tensors[case["clean"]] = clean
        if case["kind"] == "capture":
            got = capture(model, arch, ids, case["names"])
            check_capture(arch, got, golden)
            for k, t in got.items():
                tensors[f"{cid}.{k}"] = t
            continue
        logits, resid = run_case(model, arch, ids, case, tensors, clean)
        changed = (logits - plain).abs().max().item()
        if model.config.model_type not in case.get("no_effect", ()):
            assert changed > 1e-2, f"{name}: case {cid} changes the logits by {changed:g} only"
        tensors[f"{cid}.logits"] = logits
        if case.get("resid"):
            for i, t in resid.items():
                tensors[f"{cid}.resid.{i}"] = t
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    save_file(tensors, os.path.join(d, "hooks.safetensors"),
              metadata={"transformers": __import__("transformers").__version__, "torch": torch.__version__,
                        "model_type": model.config.model_type})
    return d


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = None
    if "--only" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1].split(",")
        args = [a for a in args if a != sys.argv[sys.argv.index("--only") + 1]]
    out_dir = args[0] if args else os.path.join(HERE, "models")
    # the variants (bf16 checkpoints, llama_mlp_bias, gemma3_softcap, Gemma 3 multimodal layouts)
    # share their architecture's hook points; tests/lua/test_hooks_parity.lua skips them too
    def is_variant(n):
        return (n.endswith("_bf16") or n in ("llama_mlp_bias", "gemma3_softcap", "qwen2_yarn", "llama_dynamic", "granite",
                                       "olmo2", "phi3", "phi3_short")
                or n.startswith("gemma3_multimodal"))
    names = sorted(n for n in os.listdir(out_dir)
                   if os.path.exists(os.path.join(out_dir, n, "golden.safetensors")) and not is_variant(n))
    if not names:
        print(f"FAIL no parity models in {out_dir} (run generate.py first)")
        sys.exit(1)
    for name in names:
        if only and name not in only:
            continue
        try:
            d = generate(name, out_dir)
            print(f"ok   {name}: {d}/hooks.safetensors")
        except Exception as e:
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            sys.exit(1)


if __name__ == "__main__":
    main()
