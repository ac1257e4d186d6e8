"""The attributes of transformers' config class for every model_type seer supports, with their
defaults, into tests/parity/config_fields.json (tests/lua/test_model_config_fields.lua checks
that seer handles, knows to be irrelevant, or refuses each one, so make test needs no PyPI).
Run with the project venv: .venv/bin/python tests/parity/config_fields.py [OUT_JSON]"""
import json
import os
import sys

import transformers
from transformers import AutoConfig

TYPES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "gemma3", "gpt2", "gpt_neox",
         "granite", "olmo2", "phi3"]


def plain(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return repr(v)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                               "config_fields.json")
    res = {}
    for mt in TYPES:
        cfg = AutoConfig.for_model(mt)
        d = cfg.to_dict()
        # attributes the class sets that to_dict leaves out still count
        for k, v in vars(cfg).items():
            if not k.startswith("__") and k not in d:
                d[k] = v
        res[mt] = {k: plain(v) for k, v in sorted(d.items()) if k not in ("text_config", "vision_config")}
        if mt == "gemma3":
            res[mt]["text_config"] = "(the gemma3_text fields)"
            res[mt]["vision_config"] = "(the vision tower, skipped)"
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"transformers_version": transformers.__version__, "model_types": res}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"ok   {out}")


if __name__ == "__main__":
    main()
