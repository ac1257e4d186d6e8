"""Converts the bench's Hugging Face checkpoint to GGUF with llama.cpp's own converter
(convert_hf_to_gguf.py from the llama-cpp-python source package that make bench-setup
downloads), for the llama.cpp peer of `make bench`.
Usage: .venv/bin/python tests/bench/make_gguf.py HF_DIR OUT.gguf OUTTYPE(f32|bf16) LLAMA_CPP_DIR

The bench checkpoint has random weights and no tokenizer, and the converter needs one: a tiny
SentencePiece model is trained on a few lines of text into a staging folder beside links to the
checkpoint's files (the converter pads the vocabulary to config.json's vocab_size with [PAD]
tokens). The tokenizer does not matter to the bench, which feeds token ids."""
import os
import subprocess
import sys
import tempfile

import sentencepiece as spm

hf_dir, out, outtype, src = sys.argv[1:5]
with tempfile.TemporaryDirectory() as stage:
    for name in os.listdir(hf_dir):
        if name.endswith((".json", ".safetensors")):
            os.symlink(os.path.abspath(os.path.join(hf_dir, name)), os.path.join(stage, name))
    text = os.path.join(stage, "text.txt")
    with open(text, "w") as f:
        for i in range(2000):
            f.write(f"once upon a time there was a model number {i} that read {i * 7919 % 1000} weights\n")
    spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(stage, "tokenizer"), vocab_size=400,
                                   model_type="bpe", character_coverage=1.0, byte_fallback=True,
                                   minloglevel=2)
    subprocess.run([sys.executable, os.path.join(src, "convert_hf_to_gguf.py"), stage, "--outtype", outtype,
                    "--outfile", out], check=True, stdout=subprocess.DEVNULL)
print(out)
