"""The agent harness against a fake provider: an HTTP server on loopback (in this process)
replaying recorded SSE streams from tests/fixtures/harness/ with injected faults. Each test runs
a real agent (seer tests/fixtures/harness/agent.lua) and checks how the run ends, what the
provider was sent, and that the transcript holds every event, with the API key redacted."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import seertest

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(seertest.ROOT, "tests", "fixtures", "harness")
sys.path.insert(0, FIX)
from fake_provider import FakeProvider  # noqa: E402

KEY = "sk-ant-test-KEY-0123456789abcdef"
AGENT = os.path.join(FIX, "agent.lua")


def read_transcript(path):
    with open(path) as f:
        text = f.read()
    return text, [json.loads(line) for line in text.splitlines() if line.strip()]


class HarnessCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.fake = None

    def tearDown(self):
        if self.fake:
            self.fake.stop()
        self.tmp.cleanup()

    def agent(self, responses, opts=None, env=None, timeout=60, check=True):
        self.fake = FakeProvider(responses).start()
        o = {"transcript": os.path.join(self.dir, "t.jsonl"), "prompt": "You are a test agent.",
             "retry_base": 0.05, "retry_max": 0.2}
        o.update(opts or {})
        if o.get("base_url") == "FAKE":
            o["base_url"] = self.fake.url + "/v1"
        e = {"ANTHROPIC_BASE_URL": self.fake.url, "ANTHROPIC_API_KEY": KEY, "SEER_TEST_AGENT": json.dumps(o)}
        e.update(env or {})
        t0 = time.monotonic()
        p = seertest.run([AGENT], cwd=self.dir, timeout=timeout, **e)
        self.elapsed = time.monotonic() - t0
        if check:
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.proc = p
        self.text, self.events = read_transcript(o["transcript"])
        self.assertNotIn(KEY, self.text, "the API key reached the transcript")
        self.assertNotIn(KEY, p.stdout + p.stderr, "the API key reached the output")
        # seq is 1..n without gaps: no event was lost
        self.assertEqual([e["seq"] for e in self.events], list(range(1, len(self.events) + 1)))
        return self.events

    def types(self):
        return [e["type"] for e in self.events]

    def result(self):
        self.assertEqual(self.events[-1]["type"], "result")
        return self.events[-1]

    def test_plain_text(self):
        self.agent([{"sse": "anthropic_text.sse", "chunk": 5}])
        r = self.result()
        self.assertEqual(r["reason"], "end_turn")
        self.assertEqual(r["text"], "Hello from the fake provider — ünïcode ✓.")
        self.assertEqual(self.types()[:3], ["run_start", "user", "request"])
        self.assertIn("assistant", self.types())
        self.assertIn("usage", self.types())
        deltas = "".join(e["text"] for e in self.events if e["type"] == "text_delta")
        self.assertEqual(deltas, r["text"])
        req = self.fake.requests[0]
        self.assertEqual(req["path"], "/v1/messages")
        self.assertEqual(req["headers"]["x-api-key"], KEY)
        self.assertEqual(req["headers"]["anthropic-version"], "2023-06-01")
        b = req["body"]
        self.assertTrue(b["stream"])
        self.assertEqual(b["system"], [{"type": "text", "text": "You are a test agent.", "cache_control": {"type": "ephemeral"}}])
        # cost from the price table (claude-sonnet-4-5: $3 / $15 per million)
        self.assertAlmostEqual(r["cost_usd"], (25 * 3 + 9 * 15) / 1e6)

    def test_tool_use_fragmented_json(self):
        self.agent([{"sse": "anthropic_tool.sse", "chunk": 3}, {"sse": "anthropic_final.sse"}], {"mcp": True})
        calls = [e for e in self.events if e["type"] == "tool_call"]
        self.assertEqual(calls[0]["input"], {"text": "hello world"})
        res = [e for e in self.events if e["type"] == "tool_result"][0]
        self.assertEqual(res["content"], [{"type": "text", "text": "hello world"}])
        self.assertFalse(res["is_error"])
        second = self.fake.requests[1]["body"]
        last = second["messages"][-1]
        self.assertEqual(last["role"], "user")
        self.assertEqual(last["content"][0]["tool_use_id"], "toolu_01A")
        self.assertEqual(last["content"][0]["cache_control"], {"type": "ephemeral"})
        self.assertEqual(second["tools"][-1]["cache_control"], {"type": "ephemeral"})
        self.assertEqual(self.result()["reason"], "end_turn")

    def test_parallel_tool_calls(self):
        self.agent([{"sse": "anthropic_parallel.sse"}, {"sse": "anthropic_final.sse"}], {"mcp": True})
        results = [e for e in self.events if e["type"] == "tool_result"]
        self.assertEqual([r["content"][0]["text"] for r in results], ["5", "par"])
        last = self.fake.requests[1]["body"]["messages"][-1]
        self.assertEqual([b["tool_use_id"] for b in last["content"]], ["toolu_P1", "toolu_P2"])
        self.assertEqual(len(self.fake.requests[1]["body"]["messages"]), 3)

    def test_thinking_blocks_go_back_unchanged(self):
        self.agent([{"sse": "anthropic_thinking.sse"}, {"sse": "anthropic_final.sse"}], {"mcp": True})
        sent = self.fake.requests[1]["body"]["messages"][1]["content"][0]
        self.assertEqual(sent, {"type": "thinking", "thinking": "Let me think.",
                                "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYrSaNOI9oQ=="})

    def test_pause_turn_continues(self):
        self.agent([{"sse": "anthropic_pause.sse"}, {"sse": "anthropic_final.sse"}])
        self.assertEqual(len(self.fake.requests), 2)
        msgs = self.fake.requests[1]["body"]["messages"]
        self.assertEqual(msgs[-1]["role"], "assistant")
        self.assertEqual(msgs[-1]["content"], [{"type": "text", "text": "Searching the web..."}])
        self.assertEqual(self.result()["reason"], "end_turn")
        self.assertEqual(self.result()["turns"], 2)

    def test_429_with_retry_after(self):
        err = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
        self.agent([{"status": 429, "headers": {"retry-after": "1"}, "json": err}, {"sse": "anthropic_text.sse"}])
        retry = [e for e in self.events if e["type"] == "retry"]
        self.assertEqual(len(retry), 1)
        self.assertEqual(retry[0]["status"], 429)
        self.assertEqual(retry[0]["wait_s"], 1)
        self.assertIn("rate_limit_error: slow down", retry[0]["reason"])
        self.assertGreaterEqual(self.elapsed, 1.0)
        self.assertEqual(len(self.fake.requests), 2)
        self.assertEqual(self.result()["reason"], "end_turn")

    def test_529_overloaded_backs_off(self):
        err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        self.agent([{"status": 529, "json": err}, {"status": 529, "json": err}, {"sse": "anthropic_text.sse"}])
        retry = [e for e in self.events if e["type"] == "retry"]
        self.assertEqual([r["status"] for r in retry], [529, 529])
        # 0.05 * 2^n with up to 25% jitter off
        self.assertTrue(0.0375 <= retry[0]["wait_s"] <= 0.05, retry[0])
        self.assertTrue(0.075 <= retry[1]["wait_s"] <= 0.1, retry[1])
        self.assertEqual(self.result()["reason"], "end_turn")

    def test_529_gives_up_after_max_retries(self):
        err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        self.agent([{"status": 529, "json": err}], {"max_retries": 2}, check=False)
        self.assertEqual(self.proc.returncode, 1)
        self.assertIn("gave up after 3 attempts", self.proc.stderr)
        self.assertEqual(len(self.fake.requests), 3)
        self.assertEqual(self.types()[-2:], ["error", "result"])
        self.assertEqual(self.result()["reason"], "error")

    def test_error_event_after_200(self):
        self.agent([{"sse": "anthropic_error_after_200.sse"}, {"sse": "anthropic_text.sse"}])
        retry = [e for e in self.events if e["type"] == "retry"]
        self.assertEqual(len(retry), 1)
        self.assertIn("overloaded_error", retry[0]["reason"])
        # the failed attempt's delta is in the transcript, before the retry that discards it
        t = self.types()
        self.assertLess(t.index("text_delta"), t.index("retry"))
        self.assertEqual(self.result()["text"], "Hello from the fake provider — ünïcode ✓.")

    def test_fatal_error_event_is_not_retried(self):
        self.agent([{"sse": "anthropic_invalid_request_event.sse"}], check=False)
        self.assertEqual(self.proc.returncode, 1)
        self.assertEqual(len(self.fake.requests), 1)
        self.assertIn("prompt is too long", self.proc.stderr)

    def test_dropped_stream_is_retried(self):
        self.agent([{"sse": "anthropic_text.sse", "drop_after": 700}, {"sse": "anthropic_text.sse"}])
        retry = [e for e in self.events if e["type"] == "retry"]
        self.assertEqual(len(retry), 1, self.events)
        self.assertIn("cut off", retry[0]["reason"])
        self.assertEqual(self.result()["reason"], "end_turn")
        self.assertEqual(len(self.fake.requests), 2)

    def test_spend_limit_429_is_not_retried(self):
        err = {"type": "error", "error": {"type": "rate_limit_error", "message": "spend limit reached",
                                          "details": {"error_code": "enforced_spend_limit_reached"}}}
        self.agent([{"status": 429, "headers": {"retry-after": "0", "x-should-retry": "true"}, "json": err},
                    {"sse": "anthropic_text.sse"}], check=False)
        self.assertEqual(self.proc.returncode, 1)
        self.assertEqual(len(self.fake.requests), 1)
        self.assertNotIn("retry", self.types())
        self.assertIn("spend limit reached", self.proc.stderr)
        self.assertEqual(self.types()[-2:], ["error", "result"])

    def test_401_fails_with_the_message(self):
        err = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
        self.agent([{"status": 401, "json": err}], check=False)
        self.assertEqual(self.proc.returncode, 1)
        self.assertIn("HTTP 401 authentication_error: invalid x-api-key", self.proc.stderr)
        self.assertEqual(len(self.fake.requests), 1)

    def test_tool_error_goes_back_to_the_model(self):
        events = [
            {"type": "assistant", "stop_reason": "tool_use", "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "fail", "input": {"message": "broken"}},
                {"type": "tool_use", "id": "t2", "name": "sleep", "input": {"seconds": 30}},
                {"type": "tool_use", "id": "t3", "name": "nope", "input": {}}]}},
            {"type": "assistant", "stop_reason": "end_turn",
             "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}}]
        rec = os.path.join(self.dir, "rec.jsonl")
        with open(rec, "w") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")
        self.agent([], {"mcp": True, "provider": "replay", "replay": rec, "tool_timeout": 0.5})
        res = {e["id"]: e for e in self.events if e["type"] == "tool_result"}
        self.assertTrue(res["t1"]["is_error"])
        self.assertEqual(res["t1"]["content"][0]["text"], "broken")
        self.assertTrue(res["t2"]["is_error"])
        self.assertIn("timed out", res["t2"]["content"][0]["text"])
        self.assertLess(res["t2"]["duration_s"], 5)
        self.assertTrue(res["t3"]["is_error"])
        self.assertIn("nope", res["t3"]["content"][0]["text"])
        self.assertEqual(self.result()["reason"], "end_turn")

    def test_secret_in_tool_result_is_redacted(self):
        env = {"MY_LAB_TOKEN": "lab-secret-value-42"}
        events = [
            {"type": "assistant", "stop_reason": "tool_use", "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": "s1", "name": "env", "input": {"name": "MY_LAB_TOKEN"}},
                {"type": "tool_use", "id": "s2", "name": "env", "input": {"name": "ANTHROPIC_API_KEY"}}]}},
            {"type": "assistant", "stop_reason": "end_turn",
             "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]}}]
        rec = os.path.join(self.dir, "rec.jsonl")
        with open(rec, "w") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")
        self.agent([], {"mcp": True, "provider": "replay", "replay": rec, "secrets": ["MY_LAB_TOKEN"]}, env=env)
        self.assertNotIn("lab-secret-value-42", self.text)
        self.assertNotIn("lab-secret-value-42", self.proc.stdout)
        res = [e for e in self.events if e["type"] == "tool_result"]
        self.assertEqual(res[0]["content"][0]["text"], "[REDACTED]")
        # LLM keys are not even in the tool servers' environment
        self.assertEqual(res[1]["content"][0]["text"], "(no output)")

    def test_limits(self):
        self.agent([{"sse": "anthropic_tool.sse"}], {"mcp": True, "max_turns": 2})
        self.assertEqual(self.result()["reason"], "max_turns")
        self.assertEqual(len(self.fake.requests), 2)
        os.unlink(os.path.join(self.dir, "t.jsonl"))
        self.fake.stop()
        self.agent([{"sse": "anthropic_tool.sse"}], {"mcp": True, "token_limit": 100})
        self.assertEqual(self.result()["reason"], "token_limit")
        self.assertEqual(len(self.fake.requests), 2)  # 70 tokens after one turn, 140 after two
        os.unlink(os.path.join(self.dir, "t.jsonl"))
        self.fake.stop()
        self.agent([{"sse": "anthropic_text.sse", "stall_after": 600, "stall_s": 20}], {"time_limit": 1})
        self.assertEqual(self.result()["reason"], "time_limit")
        self.assertLess(self.elapsed, 10)

    def test_openai_fragmented_tool_calls_and_invalid_json(self):
        self.agent([{"sse": "openai_tools.sse", "chunk": 11}, {"sse": "openai_final.sse"}],
                   {"mcp": True, "provider": "openai", "model": "qwen2.5-7b-instruct", "base_url": "FAKE",
                    "prompt": "sys"}, env={"OPENAI_API_KEY": None})
        calls = {e["id"]: e for e in self.events if e["type"] == "tool_call"}
        self.assertEqual(calls["call_a"]["input"], {"text": "frag"})
        self.assertEqual(calls["call_b"]["invalid_input"], '{"a": 1, "b": oops}')
        res = {e["id"]: e for e in self.events if e["type"] == "tool_result"}
        self.assertFalse(res["call_a"]["is_error"])
        self.assertTrue(res["call_b"]["is_error"])
        self.assertIn("not a valid JSON object", res["call_b"]["content"][0]["text"])
        req0 = self.fake.requests[0]
        self.assertEqual(req0["path"], "/v1/chat/completions")
        self.assertNotIn("authorization", req0["headers"])  # a local server needs no key
        b0 = req0["body"]
        self.assertEqual(b0["messages"][0], {"role": "system", "content": "sys"})
        self.assertEqual(b0["tools"][0]["type"], "function")
        self.assertEqual(b0["stream_options"], {"include_usage": True})
        msgs = self.fake.requests[1]["body"]["messages"]
        self.assertEqual(msgs[2]["role"], "assistant")
        self.assertEqual([c["function"]["arguments"] for c in msgs[2]["tool_calls"]],
                         ['{"text":"frag"}', '{"a": 1, "b": oops}'])
        self.assertEqual([(m["role"], m["tool_call_id"]) for m in msgs[3:5]], [("tool", "call_a"), ("tool", "call_b")])
        self.assertTrue(msgs[4]["content"].startswith("Error: "))
        usage = [e for e in self.events if e["type"] == "assistant"][0]["usage"]
        self.assertEqual(usage["input_tokens"], 60)
        self.assertEqual(usage["cache_read_input_tokens"], 40)
        r = self.events[-1]
        self.assertEqual((r["type"], r["reason"], r["text"]), ("result", "end_turn", "Done: frag."))

    def test_kill_9_leaves_a_readable_transcript(self):
        self.fake = FakeProvider([{"sse": "anthropic_long.sse", "stall_after": 3000, "stall_s": 30}]).start()
        path = os.path.join(self.dir, "t.jsonl")
        o = {"transcript": path, "prompt": "p"}
        proc = subprocess.Popen([seertest.SEER, AGENT], cwd=self.dir, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                                env=seertest.env(ANTHROPIC_BASE_URL=self.fake.url, ANTHROPIC_API_KEY=KEY,
                                                 SEER_TEST_AGENT=json.dumps(o)))
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if os.path.exists(path) and open(path).read().count("text_delta") >= 5:
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
        finally:
            if proc.poll() is None:
                proc.kill()
        text, events = read_transcript(path)  # every line parses
        self.assertTrue(text.endswith("\n"))
        self.assertGreaterEqual(sum(e["type"] == "text_delta" for e in events), 5)
        self.assertEqual(events[0]["type"], "run_start")
        self.assertNotIn(KEY, text)
        # and the viewer reads it
        p = seertest.run(["transcript", "view", path])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("word0", p.stdout)

    def test_ctrl_c_ends_the_transcript_with_a_result(self):
        self.fake = FakeProvider([{"sse": "anthropic_long.sse", "stall_after": 2000, "stall_s": 30}]).start()
        path = os.path.join(self.dir, "t.jsonl")
        proc = subprocess.Popen([seertest.SEER, AGENT], cwd=self.dir, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True,
                                env=seertest.env(ANTHROPIC_BASE_URL=self.fake.url, ANTHROPIC_API_KEY=KEY,
                                                 SEER_TEST_AGENT=json.dumps({"transcript": path, "mcp": True})))
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if os.path.exists(path) and "text_delta" in open(path).read():
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(proc.returncode, 130, err)
        _, events = read_transcript(path)
        self.assertEqual(events[-1]["type"], "result")
        self.assertEqual(events[-1]["reason"], "interrupted")

    def test_transcript_view(self):
        self.agent([{"sse": "anthropic_tool.sse"}, {"sse": "anthropic_final.sse"}], {"mcp": True})
        p = seertest.run(["transcript", "view", os.path.join(self.dir, "t.jsonl")])
        self.assertEqual(p.returncode, 0, p.stderr)
        for s in ["You are a test agent.", "I will echo.", "echo", "hello world", "All done.", "end_turn"]:
            self.assertIn(s, p.stdout)
        p = seertest.run(["transcript", "view", os.path.join(self.dir, "missing.jsonl")])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("missing.jsonl", p.stderr)


if __name__ == "__main__":
    unittest.main()
