"""Tokenizer parity goldens from Hugging Face's `tokenizers` package on a corpus of hard strings
(whitespace runs, CJK, emoji and ZWJ sequences, combining marks, control characters, special
tokens inside text, long words), for every tokenizer.json in the fixtures that seer loads.
Run with the project venv: .venv/bin/python tests/parity/tokenizer_goldens.py [OUT_JSON]
(default tests/parity/tokenizers.json; tests/lua/test_tokenizer_parity.lua compares)."""
import json
import os
import sys

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = {
    "gpt2": "fixtures/tokenizers/gpt2/tokenizer.json",
    "mistral-v0.3": "fixtures/tokenizers/mistral-v0.3/tokenizer.json",
    "stories260K": "fixtures/models/stories260K/tokenizer.json",
}
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


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "parity", "tokenizers.json")
    cases = {}
    for name, rel in FILES.items():
        tok = Tokenizer.from_file(os.path.join(ROOT, rel))
        rows = []
        for text in CORPUS:
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
