"""Tokenizer parity goldens from Hugging Face's `tokenizers` package on a corpus of hard strings
(whitespace runs, CJK, emoji and ZWJ sequences, combining marks, control characters, special
tokens inside text, long words), for every tokenizer.json in the fixtures that seer loads.
Run with the project venv: .venv/bin/python tests/parity/tokenizer_goldens.py [OUT_JSON]
(default tests/parity/tokenizers.json; tests/lua/test_tokenizer_parity.lua compares).

It also (re)writes tests/fixtures/tokenizers/nfc-bpe/tokenizer.json, a byte-level BPE derived
from the GPT-2 fixture (its first NFC_MERGES merges) with an NFC normalizer, deterministically."""
import json
import os
import sys

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = {
    "gpt2": "fixtures/tokenizers/gpt2/tokenizer.json",
    "mistral-v0.3": "fixtures/tokenizers/mistral-v0.3/tokenizer.json",
    "stories260K": "fixtures/models/stories260K/tokenizer.json",
    "nfc-bpe": "fixtures/tokenizers/nfc-bpe/tokenizer.json",
}
NFC_MERGES = 8000
CORPUS = [
    "", " ", "   ", "\t\t", "\n\n\n", "a  b   c    d", "  leading and trailing  ", "line\r\nbreaks\rand\nmore",
    "Hello, world! How's it going? I'm fine; we'll see.", "don't DON'T Don't", "3.14159 and 1,000,000 and 2026-11-21",
    "日本語のテキストと中文文本", "한국어 텍스트", "Ελληνικά και русский текст", "مرحبا بالعالم", "שלום עולם",
    "emoji 🙂🙃 family 👨‍👩‍👧‍👦 flag 🇫🇷 skin 👍🏽", "combining e\u0301 a\u0300 n\u0303 and precomposed é à ñ",
    "zero\u200bwidth\u200cjoiners\u200d", "tabs\tinside\twords", "control \x01\x02\x7f chars",
    "<s> bos inside text </s>", "[INST] instruction [/INST]", "<|endoftext|> gpt2 special in text <|endoftext|>",
    "supercalifragilisticexpialidocious" * 3, "a" * 200, "    indented code:\n        return x ** 2\n",
    "URL https://example.com/path?q=1&r=2#frag and email a.b@c.de", "!!!???...,,,;;;", "MiXeD CaSe WoRdS",
    "ʼapostrophe variants ’ ‘ ＂fullwidth＂ ａｂｃ", "\u00a0non-breaking\u00a0spaces\u3000ideographic",
]

# More strings for the tokenizers with a Unicode normalizer: Hangul jamo, marks to reorder and
# compose, singletons, composition exclusions, compatibility characters NFC keeps.
NORM_CORPUS = [
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af jamo and syllables 한글",
    "a\u0301\u0323 q\u0307\u0323 d\u0323\u0307 e\u0302\u0323 Vie\u0323\u0302t",
    "\u212b \u2126 \u212a \u0340 \u0374 \u037e \u0387 \uf900 singletons",
    "\u0958 \u0344 \u0f73 \ufb1d \u2adc exclusions", "ﬁ ① ㈱ ｶﾞ ½ ™ compat kept by NFC",
    "\u0301\u0300 leading marks", "ka\u3099 \u30ab\u3099 \u304b\u3099 dakuten",
    "<|endoftext|>e\u0301<|endoftext|>",
]


def make_nfc_bpe():
    """GPT-2's vocabulary cut to the 256 byte tokens and the first NFC_MERGES merges (ids are
    kept: GPT-2's id 256+i is merge i), <|endoftext|> renumbered to follow, NFC normalizer."""
    with open(os.path.join(ROOT, "fixtures/tokenizers/gpt2/tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    keep = 256 + NFC_MERGES
    m = j["model"]
    m["vocab"] = {t: i for t, i in m["vocab"].items() if i < keep}
    m["merges"] = m["merges"][:NFC_MERGES]
    assert len(m["vocab"]) == keep
    j["added_tokens"][0]["id"] = keep
    j["normalizer"] = {"type": "NFC"}
    d = os.path.join(ROOT, "fixtures/tokenizers/nfc-bpe")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "parity", "tokenizers.json")
    make_nfc_bpe()
    cases = {}
    for name, rel in FILES.items():
        tok = Tokenizer.from_file(os.path.join(ROOT, rel))
        rows = []
        for text in CORPUS + (NORM_CORPUS if name == "nfc-bpe" else []):
            enc = tok.encode(text, add_special_tokens=True)
            plain = tok.encode(text, add_special_tokens=False)
            rows.append({"text": text, "ids": plain.ids, "ids_with_special": enc.ids,
                         "decoded": tok.decode(plain.ids, skip_special_tokens=False)})
        cases[name] = {"file": rel, "cases": rows}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": __import__("tokenizers").__version__, "tokenizers": cases}, f,
                  ensure_ascii=False, indent=1)
    print(f"wrote {out}: {sum(len(c['cases']) for c in cases.values())} cases")


if __name__ == "__main__":
    main()
