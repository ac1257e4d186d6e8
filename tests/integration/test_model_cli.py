"""`seer model info|generate` as a user runs them from the shell, on the real stories260K."""
import json
import os
import unittest

from seertest import ROOT, run

MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "stories260K")


class ModelCliTest(unittest.TestCase):
    def test_info(self):
        r = run(["model", "info", MODEL])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("architecture:      LlamaForCausalLM (model_type llama)", r.stdout)
        self.assertIn("parameters:        260,032", r.stdout)
        self.assertIn("attention heads:   8 query, 4 key/value, head_dim 8", r.stdout)
        self.assertIn("weights:           f32, 1.0 MiB", r.stdout)
        # tied embeddings: the head reads the whole table every token
        self.assertIn("decode reads:      1.0 MiB of weights per token\n", r.stdout)

    def test_generate_greedy_matches_golden(self):
        with open(os.path.join(MODEL, "golden", "golden.json")) as f:
            golden = json.load(f)
        r = run(["model", "generate", MODEL, golden["prompt"], "--max-new-tokens", "30"])
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout.rstrip("\n")
        self.assertTrue(golden["greedy_text_including_prompt"].startswith(text), text)
        self.assertGreater(len(text), len(golden["prompt"]) + 40)
        self.assertRegex(r.stderr, r"\[5 prompt \+ 30 new tokens; load [\d.]+ ms, generate [\d.]+ ms")

    def test_generate_sampling_is_reproducible(self):
        args = ["model", "generate", MODEL, "Once upon a time", "--temperature", "0.9", "--seed", "3",
                "--max-new-tokens", "25"]
        self.assertEqual(run(args).stdout, run(args).stdout)

    def test_generate_shows_prompt_and_continuation_as_one_text(self):
        # the continuation's pieces decoded alone drop the space SentencePiece puts before the
        # first new word: this printed "Onceupon a time" (transformers' TextStreamer decodes the
        # whole sequence and prints what it gained)
        r = run(["model", "generate", MODEL, "Once", "--max-new-tokens", "6"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("Once upon a time"), r.stdout)

    def test_escape_sequences_in_the_text_are_shown_on_a_terminal_and_kept_in_a_pipe(self):
        # a model's vocabulary can decode to any bytes (byte-fallback tokens): on a terminal
        # they are shown, not obeyed; into a pipe the text is as generated
        from seertest import Pty
        prompt = "Once \x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J"
        p = Pty(["model", "generate", MODEL, prompt, "--max-new-tokens", "3"])
        p.expect(r"Once \\x1b\]52;c;cm0gLXJmIH4=\\x07 \\x1b\[2J")
        p.expect(r"tokens/s\]")
        self.assertEqual(p.wait(), 0)
        self.assertNotIn(b"\x1b", p.buf)
        r = run(["model", "generate", MODEL, prompt, "--max-new-tokens", "3"])
        self.assertTrue(r.stdout.startswith(prompt), repr(r.stdout))

    def test_bad_option_values_print_one_line_and_no_text(self):
        for args, msg in ((["--temperature", "nan"], "temperature must be a finite number >= 0"),
                          (["--top-p", "2"], "top_p must be a finite number from 0 to 1"),
                          (["--seed", "1.5"], "seed must be a whole number"),
                          (["--max-new-tokens", "1e999"], "max_new_tokens must be a whole number from 0 to 2147483647, got inf")):
            r = run(["model", "generate", MODEL, "Once"] + args)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertEqual(r.stdout, "", args)
            self.assertIn(msg, r.stderr)
            self.assertNotIn("stack traceback", r.stderr)

    def test_precision(self):
        # on f32 weights fast changes nothing and says so once; anything but exact or fast is a
        # usage error (bf16 models in fast mode: tests/lua/test_model_batch.lua)
        r = run(["model", "generate", MODEL, "Once", "--precision", "fast", "--max-new-tokens", "4"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("Once upon a time"), r.stdout)
        self.assertEqual(r.stderr.count('precision = "fast" changes nothing here: its weights are f32'), 1, r.stderr)
        r = run(["model", "generate", MODEL, "Once", "--precision", "half"])
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertIn("--precision needs exact or fast", r.stderr)
        r = run(["serve", MODEL, "--precision", "half"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--precision must be exact or fast, got 'half'", r.stderr)

    def test_errors(self):
        r = run(["model", "info", "/nonexistent/model"])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip().splitlines()[0][:12], "seer model: ")
        self.assertIn("/nonexistent/model is not a model directory", r.stderr)
        self.assertNotIn("stack traceback", r.stderr)
        r = run(["model", "generate", MODEL, "x", "--max-new-tokns", "3"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option '--max-new-tokns'", r.stderr)
        r = run(["model", "frob"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("subcommands: info, generate", r.stderr)
        r = run(["help", "model"])
        self.assertIn("seer model generate PATH PROMPT", r.stdout)


if __name__ == "__main__":
    unittest.main()


class ProgressLineTest(unittest.TestCase):
    """Long toolkit operations show a progress line on a terminal and nothing when piped."""

    CODE = ('local S = require "toolkit.sae"; '
            'local s = S.train(require("seer.tensor").randn({ 256, 16 }, { seed = 1 }), { steps = 40 }); '
            'print("trained", s.m)')

    def test_sae_train_progress_on_a_terminal_only(self):
        from seertest import Pty
        p = Pty(["-e", self.CODE])
        p.expect(r"sae\.train: step 40/40, loss [\d.e+-]+ *\r?\n", timeout=60)
        p.expect(r"trained\t64", timeout=30)
        self.assertEqual(p.wait(30), 0)
        p.close()
        r = run(["-e", self.CODE], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "trained\t64\n")
        self.assertNotIn("sae.train", r.stderr)

    def test_generate_batch_and_patch_sweep_progress_on_a_terminal_only(self):
        from seertest import Pty
        code = (f'local m = require("seer").model.load({json.dumps(MODEL)}); '
                'local outs = m:generate_batch({ "Once upon", "The dog", "A cat" }, { max_new_tokens = 4 }); '
                'local AP = require "toolkit.activation_patching"; '
                'local clean = m.tokenizer:encode("Once upon a time"); local corrupt = { unpack(clean) }; '
                'corrupt[#corrupt] = 100; '
                'local r = AP.patch_sweep(m, clean, corrupt, function(l) return l[{ -1, 1 }] end); '
                'print("results", #outs, r:size(1), r:size(2))')
        p = Pty(["-e", code])
        p.expect(r"generate_batch: 3/3 done *\r?\n", timeout=60)
        p.expect(r"patch_sweep: layer 5/5 \(5 positions each\) *\r?\n", timeout=60)
        p.expect(r"results\t3\t5\t5", timeout=30)
        self.assertEqual(p.wait(30), 0)
        p.close()
        r = run(["-e", code], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "results\t3\t5\t5\n")
        self.assertEqual(r.stderr, "")
