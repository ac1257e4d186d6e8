"""The REPL on a real pseudo-terminal: prompts, values, multi-line chunks, errors, Ctrl-C
while code runs and at the prompt, Ctrl-D, history across sessions, Tab completion."""
import os
import time
import unittest

from seertest import Pty, tmpdir

PROMPT = r"(?m)^> $"
PROMPT_AFTER = r"\n> $"


class ReplTest(unittest.TestCase):
    def start(self, **env):
        p = Pty(**env)
        self.addCleanup(p.close)
        p.expect(r"seer \d+\.\d+\.\d+")
        p.expect(r"> ")
        return p

    def test_expression_value_is_printed(self):
        p = self.start()
        p.line("1+1")
        p.expect(r"\r\n2\r\n> ")

    def test_multiple_values_and_nil(self):
        p = self.start()
        p.line("1, 'a', nil")
        p.expect(r'\r\n1\t"a"\tnil\r\n> ')

    def test_statement_prints_nothing(self):
        p = self.start()
        p.line("x = 40")
        p.expect(r"x = 40\r\n> ")
        p.line("x + 2")
        p.expect(r"\r\n42\r\n> ")

    def test_multiline_function_definition(self):
        p = self.start()
        p.line("function double(x)")
        p.expect(r">> ")
        p.line("  local y = x * 2")
        p.expect(r">> ")
        p.line("  return y")
        p.expect(r">> ")
        p.line("end")
        p.expect(r"\r\n> ")
        p.line("double(21)")
        p.expect(r"\r\n42\r\n> ")

    def test_multiline_table_constructor(self):
        p = self.start()
        p.line("t = {")
        p.expect(r">> ")
        p.line("  a = 1,")
        p.expect(r">> ")
        p.line("}")
        p.expect(r"\r\n> ")
        p.line("t.a")
        p.expect(r"\r\n1\r\n> ")

    def test_tables_are_pretty_printed(self):
        p = self.start()
        p.line("{b = {c = 2}, a = 1, 10, 20}")
        p.expect(r"\{ 10, 20, a = 1, b = \{ c = 2 \} \}\r\n> ")

    def test_deep_tables_are_cut(self):
        p = self.start()
        p.line("{a = {b = {c = {d = 1}}}}")
        p.expect(r"\{ a = \{ b = \{ c = \{\.\.\.\} \} \} \}\r\n> ")

    def test_survives_an_error(self):
        p = self.start()
        p.line("error('boom')")
        p.expect(r"stdin:1: boom")
        p.expect(r"stack traceback:")
        p.expect(r"> ")
        p.line("1+2")
        p.expect(r"\r\n3\r\n> ")

    def test_syntax_error_is_reported(self):
        p = self.start()
        p.line("x = = 1")
        p.expect(r"stdin:1: unexpected symbol near '='")
        p.expect(r"> ")
        p.line("'still here'")
        p.expect(r'"still here"\r\n> ')

    def test_ctrl_c_interrupts_infinite_loop(self):
        p = self.start()
        p.line("while true do end")
        time.sleep(0.5)  # let it spin (and LuaJIT try to compile it)
        p.send("\x03")
        p.expect(r"interrupted", timeout=5)
        p.expect(r"> ")
        p.line("2+3")
        p.expect(r"\r\n5\r\n> ")

    def test_ctrl_c_interrupts_loop_in_function_defined_at_prompt(self):
        p = self.start()
        p.line("function spin() local n = 0 while true do n = n + 1 end end")
        p.expect(r"\r\n> ")
        p.line("spin()")
        time.sleep(0.5)
        p.send("\x03")
        p.expect(r"interrupted", timeout=5)
        p.expect(r"in function 'spin'")
        p.expect(r"> ")
        p.line("6*7")
        p.expect(r"\r\n42\r\n> ")

    def test_ctrl_c_at_prompt_discards_the_line(self):
        p = self.start()
        p.send("error('never run')")
        time.sleep(0.2)
        p.send("\x03")
        p.expect(r"\^C\r?\n")
        p.expect(r"> ")
        p.line("7*6")
        p.expect(r"\r\n42\r\n> ")
        self.assertNotIn("stdin:1: never run", p.text())

    def test_ctrl_c_discards_a_pending_multiline_chunk(self):
        p = self.start()
        p.line("function f()")
        p.expect(r">> ")
        p.send("\x03")
        p.expect(r"\^C\r?\n> ")
        p.line("f == nil")
        p.expect(r"\r\ntrue\r\n> ")

    def test_ctrl_d_exits_cleanly(self):
        p = self.start()
        p.send("\x04")
        self.assertEqual(p.wait(), 0)

    def test_seer_modules_are_preloaded(self):
        p = self.start()
        p.line("seer.json.encode({a = 1})")
        p.expect(r'"\{\\"a\\":1\}"\r\n> ')
        p.line("require('seer.json') == seer.json")
        p.expect(r"\r\ntrue\r\n> ")

    def test_tab_completes_table_fields(self):
        p = self.start()
        p.send("string.upp\t")
        p.expect(r"string\.upper")
        p.line("('ab')")
        p.expect(r'"AB"\r\n> ')

    def test_tab_completes_lazily_loaded_seer_modules(self):
        p = self.start()
        p.send("seer.js\t")
        p.expect(r"seer\.json")  # no space appended: the user goes on with "."
        p.send(".enc\t")
        p.expect(r"\.encode")
        p.line("({1})")
        p.expect(r'"\[1\]"\r\n> ')
        self.assertIn("seer.json.encode({1})", p.text())

    def test_history_persists_across_sessions(self):
        d = tmpdir(self)
        hist = os.path.join(d, "history")
        p = self.start(SEER_HISTORY=hist)
        p.line("40 + 2")
        p.expect(r"\r\n42\r\n> ")
        p.send("\x04")
        self.assertEqual(p.wait(), 0)
        with open(hist) as f:
            self.assertIn("40 + 2", f.read())
        q = self.start(SEER_HISTORY=hist)
        q.send("\x1b[A")  # up arrow recalls the last chunk
        q.send("\r")
        q.expect(r"\r\n42\r\n> ")


if __name__ == "__main__":
    unittest.main()
