"""run_agent_interactive on a real pseudo-terminal against the fake provider: streamed output,
ESC interrupting a response (the stream is cancelled, the partial answer kept, the conversation
goes on), a tool call shown as it runs, and the ways out (exit, quit, Ctrl-D)."""
import json
import os
import sys
import unittest

import seertest

FIX = os.path.join(seertest.ROOT, "tests", "fixtures", "harness")
sys.path.insert(0, FIX)
from fake_provider import FakeProvider  # noqa: E402

AGENT = os.path.join(FIX, "agent.lua")
KEY = "sk-ant-test-interactive-0123456789"


class InteractiveCase(unittest.TestCase):
    def start(self, responses, opts=None):
        self.fake = FakeProvider(responses).start()
        self.addCleanup(self.fake.stop)
        self.dir = seertest.tmpdir(self)
        self.transcript = os.path.join(self.dir, "t.jsonl")
        o = {"transcript": self.transcript, "prompt": "Chat."}
        o.update(opts or {})
        self.p = seertest.Pty([AGENT], cwd=self.dir, ANTHROPIC_BASE_URL=self.fake.url, ANTHROPIC_API_KEY=KEY,
                              SEER_TEST_AGENT=json.dumps(o), SEER_TEST_INTERACTIVE="1")
        self.addCleanup(self.p.close)
        return self.p

    def events(self):
        with open(self.transcript) as f:
            return [json.loads(line) for line in f]

    def test_esc_interrupts_and_the_conversation_goes_on(self):
        p = self.start([{"sse": "anthropic_long.sse", "slow_events_ms": 60}, {"sse": "anthropic_text.sse"}])
        p.expect(r"> ")
        p.line("tell me a long story")
        p.expect(r"word3 ")
        p.send(b"\x1b")
        p.expect(r"\[interrupted\]")
        p.expect(r"> ")
        self.assertNotIn("word59", p.text(), "the stream went on after ESC")
        p.line("a short one then")
        p.expect(r"Hello from the fake provider")
        p.expect(r"> ")
        p.line("exit")
        p.expect(r"RESULT (\{.*\})")
        self.assertEqual(p.wait(), 0)
        # the second request carries the partial answer and says that the user interrupted it
        msgs = self.fake.requests[1]["body"]["messages"]
        self.assertEqual([m["role"] for m in msgs], ["user", "assistant", "user"])
        self.assertTrue(msgs[1]["content"][0]["text"].startswith("word0 word1 word2 word3"))
        texts = [b["text"] for b in msgs[2]["content"]]
        self.assertEqual(texts, ["[The user interrupted the response.]", "a short one then"])
        types = [e["type"] for e in self.events()]
        self.assertIn("interrupted", types)
        self.assertEqual(types[-1], "result")
        self.assertEqual(self.events()[-1]["reason"], "user_exit")

    def test_esc_during_tools_cancels_the_pending_calls(self):
        p = self.start([{"sse": "anthropic_sleep_tools.sse"}, {"sse": "anthropic_text.sse"}], {"mcp": True})
        p.expect(r"> ")
        p.line("sleep then echo")
        p.expect(r"\[tool\] sleep")
        p.send(b"\x1b")
        p.expect(r"\[interrupted\]")
        p.expect(r"> ")
        self.assertNotIn("[tool] echo", p.text())
        p.line("go on")
        p.expect(r"Hello from the fake provider")
        p.expect(r"> ")
        p.line("exit")
        self.assertEqual(p.wait(), 0)
        last = self.fake.requests[1]["body"]["messages"][-1]
        self.assertEqual(last["role"], "user")
        blocks = last["content"]
        self.assertEqual([b.get("tool_use_id") for b in blocks[:2]], ["toolu_S1", "toolu_S2"])
        self.assertEqual(blocks[0]["content"][0]["text"], "slept")
        self.assertTrue(blocks[1]["is_error"])
        self.assertIn("Cancelled", blocks[1]["content"][0]["text"])
        self.assertEqual([b["text"] for b in blocks[2:]], ["[The user interrupted the tool calls.]", "go on"])

    def test_tools_and_ctrl_d(self):
        p = self.start([{"sse": "anthropic_tool.sse"}, {"sse": "anthropic_final.sse"}], {"mcp": True})
        p.expect(r"> ")
        p.line("echo something")
        p.expect(r"\[tool\] echo\(\{\"text\":\"hello world\"\}\)")
        p.expect(r"\[result\] hello world")
        p.expect(r"All done\.")
        p.expect(r"> ")
        p.send(b"\x04")
        p.expect(r"RESULT")
        self.assertEqual(p.wait(), 0)
        self.assertEqual(len(self.fake.requests), 2)

    def test_escape_sequences_reach_the_terminal_shown_not_obeyed(self):
        # A tool's output is a sandbox's (hostile) and the model's text may echo it: their
        # escape sequences (a clipboard write, a title, a screen clear, a line hidden behind a
        # carriage return) are written as text on the terminal; colours are dropped.
        p = self.start([{"sse": "anthropic_banner_tool.sse"}, {"sse": "anthropic_final.sse"}], {"mcp": True})
        p.expect(r"> ")
        p.line("show the banner")
        p.expect(r"I will \\x1b\]0;owned\\x07show it\.")
        p.expect(r"\[result\] clip\\x1b\]52;c;cm0gLXJmIH4=\\x07 \\x1b\[2Jcleared red hidden\\x0dshown")
        p.expect(r"All done\.")
        p.expect(r"> ")
        p.send(b"\x04")
        p.expect(r"RESULT")
        self.assertEqual(p.wait(), 0)
        shown = p.buf[:p.buf.index(b"RESULT")]
        self.assertNotIn(b"\x1b]", shown)
        self.assertNotIn(b"\x1b[2J", shown)
        self.assertNotIn(b"\x07", shown)
        # the transcript keeps the bytes as they were
        results = [e for e in self.events() if e["type"] == "tool_result"]
        self.assertIn("\x1b]52;c;", results[0]["content"][0]["text"])
        # and `seer transcript view` shows them the same way, on a terminal or not
        view = seertest.run(["transcript", "view", self.transcript])
        self.assertEqual(view.returncode, 0, view.stderr)
        self.assertIn("clip\\x1b]52;c;cm0gLXJmIH4=\\x07 \\x1b[2Jcleared red hidden\\x0dshown", view.stdout)
        self.assertIn("I will \\x1b]0;owned\\x07show it.", view.stdout)
        self.assertNotIn("\x1b", view.stdout)

    def test_ctrl_c_at_the_prompt_ends_the_transcript_with_a_result(self):
        # Ctrl-C while the chat waits for the user's line: raised in the chat's own code (reading
        # the line), outside the agent's loop, and still the transcript's last event
        p = self.start([{"sse": "anthropic_text.sse"}], {"user_message": "hi"})
        p.expect(r"Hello from the fake provider")
        p.expect(r"> ")
        p.send(b"\x03")
        self.assertEqual(p.wait(), 130)
        events = self.events()
        self.assertEqual((events[-1]["type"], events[-1]["reason"]), ("result", "interrupted"))
        self.assertEqual(sum(e["type"] == "result" for e in events), 1)

    def test_first_message_and_quit(self):
        p = self.start([{"sse": "anthropic_text.sse"}], {"user_message": "hi"})
        p.expect(r"Hello from the fake provider")
        p.expect(r"> ")
        p.line("quit")
        p.expect(r"RESULT")
        self.assertEqual(p.wait(), 0)
        self.assertEqual(self.fake.requests[0]["body"]["messages"][0]["content"][0]["text"], "hi")


if __name__ == "__main__":
    unittest.main()
