"""Chat-template parity goldens rendered by transformers itself (render_jinja_template, the
function apply_chat_template calls) for the real templates of six families, on the fixture
conversations plus each one with add_generation_prompt flipped. Cases that raise in
transformers are stored with the exception text.
Run with the project venv: .venv/bin/python tests/parity/chat_goldens.py [OUT_JSON]
(default tests/parity/chat_templates.json; tests/lua/test_chat_template_parity.lua compares)."""
import copy
import json
import os
import sys

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ["gemma2", "gemma3", "llama3", "qwen2.5", "smollm2", "mistral-v0.3"]


def load(family):
    d = os.path.join(ROOT, "fixtures", "tokenizers", family)
    path = os.path.join(d, "tokenizer_config.json")
    cfg = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}
    tmpl = cfg.get("chat_template")
    if isinstance(tmpl, list):
        tmpl = [t["template"] for t in tmpl if t["name"] == "default"][0]
    jinja = os.path.join(d, "chat_template.jinja")
    if os.path.exists(jinja):
        tmpl = open(jinja, encoding="utf-8").read()
    tokens = {}
    for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if v is not None:
            tokens[k] = v
    return tmpl, tokens


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "parity", "chat_templates.json")
    result = {"transformers": transformers.__version__, "families": {}}
    for family in FAMILIES:
        tmpl, tokens = load(family)
        golden = json.load(open(os.path.join(ROOT, "fixtures", "tokenizers", family, "golden-cases.json"), encoding="utf-8"))
        cases = []
        for case in golden.get("chat", []):
            for flip in (False, True):
                agp = bool(case.get("add_generation_prompt")) != flip
                kwargs = dict(case.get("template_kwargs") or {})
                row = {"id": case["id"] + ("/flipped" if flip else ""), "messages": case["messages"],
                       "add_generation_prompt": agp, "template_kwargs": kwargs}
                if case.get("tools") is not None:
                    row["tools"] = case["tools"]
                try:
                    text, _ = render_jinja_template(conversations=[copy.deepcopy(case["messages"])],
                                                    tools=copy.deepcopy(case.get("tools")), chat_template=tmpl,
                                                    add_generation_prompt=agp, **tokens, **kwargs)
                    row["text"] = text[0]
                except Exception as e:  # the template raised (raise_exception) or rejected the input
                    row["error"] = str(e)
                cases.append(row)
        result["families"][family] = {"tokens": tokens, "cases": cases}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
    print(f"wrote {out}: {sum(len(v['cases']) for v in result['families'].values())} cases")


if __name__ == "__main__":
    main()
