"""Differential fuzzing of seer's tokenizers against Hugging Face's `tokenizers` package: random
and adversarial strings (white space of every kind, U+180E, NUL and other controls, "▁" at the
start, special-token text, combining marks, CJK, emoji and ZWJ sequences, fullwidth and
compatibility characters, random code points) through every tokenizer.json the tests have,
plus synthetic ones made here for the components the fixtures lack (WhitespaceSplit with a NUL
vocabulary entry, Metaspace with prepend_scheme "first" and split, Whitespace/Punctuation/Digits
with NFKC and Strip). For each string: the ids without and with special tokens and the decoded
text, folded into one number, so the stored goldens stay small; tests/lua/test_tokenizer_fuzz.lua
compares (and prints seer's ids for any string that differs).

    .venv/bin/python tests/parity/tokenizer_fuzz.py [OUT_JSON] [--seed N] [--count N]

OUT_JSON defaults to tests/parity/tokenizer_fuzz.json (the goldens make test uses); `make
tokenizer-fuzz` runs it live with a fresh seed and compares at once."""
import json
import os
import random
import sys

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FILES = {
    "gpt2": "fixtures/tokenizers/gpt2/tokenizer.json",
    "mistral-v0.3": "fixtures/tokenizers/mistral-v0.3/tokenizer.json",
    "stories260K": "fixtures/models/stories260K/tokenizer.json",
    "nfc-bpe": "fixtures/tokenizers/nfc-bpe/tokenizer.json",
    "wsplit-nul": "parity/tokenizer_fuzz/wsplit-nul/tokenizer.json",
    "metaspace-first-split": "parity/tokenizer_fuzz/metaspace-first-split/tokenizer.json",
    "whitespace-punct": "parity/tokenizer_fuzz/whitespace-punct/tokenizer.json",
}

WHITE = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u180e", "\u2000", "\u2001", "\u2002",
         "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029",
         "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff", "  ", "\r\n", "\t\t", "   "]
CONTROL = ["\x00", "\x01", "\x07", "\x1b", "\x1f", "\x7f", "\x80", "\x9f", "\x00\x00"]
META = ["\u2581", "\u2581\u2581", " \u2581", "\u2581 ", "\u2581a"]
SPECIAL = ["<s>", "</s>", "<unk>", "<|endoftext|>", "[INST]", "[/INST]", "<pad>", "<s", "</s", "<|endoftext|"]
WORDS = ["the", "The", "hello", "Hello", "world", "don't", "I'm", "we'll", "they've", "it's", "n't", "'s", "'ll",
         "supercalifragilistic", "a", "ab", "abc", "x", "thé", "naïve", "Straße", "café", "élan", "ﬁ", "ﬀ"]
DIGITS = ["0", "1", "42", "3.14", "1,000", "2026-11-25", "٣", "१२", "௫", "①", "½", "²", "ⅷ"]
PUNCT = [".", ",", "!", "?", ";", ":", "...", "…", "-", "--", "—", "(", ")", "[", "]", "{", "}", "\"", "'",
         "`", "~", "@", "#", "$", "%", "^", "&", "*", "_", "+", "=", "|", "\\", "/", "<", ">", "¿", "¡", "«", "»",
         "\u3002", "\uff01"]
SCRIPTS = ["日本語", "中文文本", "한국어", "\u1100\u1161\u11a8", "Ελληνικά", "русский", "مرحبا", "שלום", "हिन्दी",
           "ไทย", "ქართული", "Ꭰ", "𐍈", "𝔘𝔫𝔦"]
MARKS = ["e\u0301", "a\u0300\u0323", "\u0301", "\u0323\u0307", "n\u0303", "\u0344", "\u0958", "ka\u3099",
         "\u212b", "\u2126", "\uf900", "ｶﾞ", "㈱", "™"]
EMOJI = ["🙂", "🙃", "👨\u200d👩\u200d👧\u200d👦", "🇫🇷", "👍🏽", "❤\ufe0f", "\u200d", "\u200c", "🏳\ufe0f\u200d🌈"]
FULLWIDTH = ["ＡＢＣ", "ａｂｃ", "１２３", "＂", "　"]
POOLS = [(WHITE, 14), (CONTROL, 3), (META, 4), (SPECIAL, 3), (WORDS, 22), (DIGITS, 6), (PUNCT, 10),
         (SCRIPTS, 6), (MARKS, 6), (EMOJI, 5), (FULLWIDTH, 3)]

# Hand-written cases first: the ones the issue names, and their neighbours.
NAMED = [
    "\u2581Hello", "\u2581", "\u2581\u2581x", " \u2581Hello", "\u2581 Hello", "Hello \u2581world", "\u2581\u2581",
    "x\u180ex", "\u180e", "a \u180e b", "\u180e lead", "trail \u180e", "x\u200bx", "x\xa0x", "x\u3000x", "x\x85x",
    "\x00", "a\x00b", "a\x00", "\x00a\x00", "a\x00b c", "<s>\x00</s>", "", " ", "\u2581<s>", "<s>\u2581Hello",
]


def random_codepoint(rng):
    while True:
        r = rng.random()
        if r < 0.5:
            cp = rng.randrange(0x20, 0x800)
        elif r < 0.9:
            cp = rng.randrange(0x800, 0x10000)
        else:
            cp = rng.randrange(0x10000, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def random_string(rng):
    total = sum(w for _, w in POOLS)
    parts = []
    for _ in range(rng.randrange(1, 16)):
        if rng.random() < 0.12:
            parts.append("".join(random_codepoint(rng) for _ in range(rng.randrange(1, 4))))
            continue
        x = rng.uniform(0, total)
        for pool, w in POOLS:
            x -= w
            if x <= 0:
                parts.append(rng.choice(pool))
                break
        if rng.random() < 0.5:
            parts.append(" ")
    s = "".join(parts)
    r = rng.random()
    if r < 0.08:
        s = "\u2581" + s  # text that already starts with the Metaspace replacement
    elif r < 0.14:
        s = rng.choice(WHITE) + s
    elif r < 0.18:
        s = s + rng.choice(WHITE)
    return s


def corpus(seed, count):
    rng = random.Random(seed)
    out = list(NAMED)
    while len(out) < count:
        out.append(random_string(rng))
    return out[:count]


def fold(values):
    """The hash tests/lua/test_tokenizer_fuzz.lua computes: exact in doubles."""
    h = 0
    for v in values:
        h = (h * 1000003 + v + 7) % 2147483647
    return h


def signature(tok, text):
    plain = tok.encode(text, add_special_tokens=False).ids
    special = tok.encode(text, add_special_tokens=True).ids
    decoded = tok.decode(plain, skip_special_tokens=False)
    return fold(plain + [-1] + special + [-2] + list(decoded.encode("utf-8")))


def byte_fallback_vocab(extra):
    vocab = {f"<0x{b:02X}>": b for b in range(256)}
    for t in extra:
        if t not in vocab:
            vocab[t] = len(vocab)
    return vocab


def bpe(vocab, merges):
    for a, b in merges:  # every merge's parts and result are tokens
        for t in (a, b, a + b):
            if t not in vocab:
                vocab[t] = len(vocab)
    return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True, "ignore_merges": False,
            "vocab": vocab, "merges": merges}


def added(content, id_):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def synthetic():
    """The synthetic tokenizers, deterministic; written under tests/parity/tokenizer_fuzz/."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    toks = {}
    # WhitespaceSplit + Strip, a vocabulary with NUL entries (and a merge through one)
    v = byte_fallback_vocab(letters + ["\x00", "a\x00", "a\x00b", "\u180e", "x\u180e", "th", "the", "he", "ll", "o"])
    m = bpe(v, [["a", "\x00"], ["a\x00", "b"], ["t", "h"], ["th", "e"], ["h", "e"], ["l", "l"], ["x", "\u180e"]])
    toks["wsplit-nul"] = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added("<s>", len(v)), added("</s>", len(v) + 1)],
        "normalizer": {"type": "Strip", "strip_left": True, "strip_right": True},
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [len(v)], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": m,
    }
    # Metaspace, prepend_scheme "first", split: the Mistral v0.3 rule with splitting on
    v = byte_fallback_vocab(["\u2581", "\u2581\u2581"] + letters + ["\u2581" + c for c in letters[:26]] +
                            ["\u2581th", "\u2581the", "he", "ll", "\u2581he", "\u2581hello", "\u2581H", "\u2581Hello"])
    m = bpe(v, [["\u2581", "\u2581"], ["\u2581", "t"], ["\u2581t", "h"], ["\u2581th", "e"], ["h", "e"],
                ["l", "l"], ["\u2581", "h"], ["\u2581h", "e"], ["\u2581he", "ll"], ["\u2581hell", "o"],
                ["\u2581", "H"], ["\u2581H", "e"], ["\u2581He", "ll"], ["\u2581Hell", "o"]])
    toks["metaspace-first-split"] = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added("<s>", len(v)), added("</s>", len(v) + 1)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Metaspace", "replacement": "\u2581",
                                                      "prepend_scheme": "first", "split": True}]},
        "model": m,
    }
    # Whitespace + Punctuation + Digits under NFKC + Strip
    v = byte_fallback_vocab(letters + [str(d) for d in range(10)] + ["th", "the", "he", "in", "ing", ".", ",", "!"])
    m = bpe(v, [["t", "h"], ["th", "e"], ["h", "e"], ["i", "n"], ["in", "g"]])
    toks["whitespace-punct"] = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [added("<|endoftext|>", len(v))],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"},
                                                           {"type": "Strip", "strip_left": True, "strip_right": True}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"},
                                                                {"type": "Punctuation", "behavior": "Isolated"},
                                                                {"type": "Digits", "individual_digits": True}]},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": m,
    }
    for name, j in toks.items():
        d = os.path.join(HERE, "tokenizer_fuzz", name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")


def main():
    args = [a for i, a in enumerate(sys.argv[1:]) if not a.startswith("--") and sys.argv[i] not in ("--seed", "--count")]
    out = args[0] if args else os.path.join(HERE, "tokenizer_fuzz.json")
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 22
    count = int(sys.argv[sys.argv.index("--count") + 1]) if "--count" in sys.argv else 5000
    synthetic()
    strings = corpus(seed, count)
    res = {}
    for name, rel in FILES.items():
        tok = Tokenizer.from_file(os.path.join(ROOT, rel))
        res[name] = {"file": rel, "hash": [signature(tok, s) for s in strings]}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": __import__("tokenizers").__version__, "seed": seed, "named": len(NAMED),
                   "strings": strings, "tokenizers": res}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"ok   {out}: {len(strings)} strings x {len(FILES)} tokenizers (seed {seed})")


if __name__ == "__main__":
    main()
