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
        elif o.get("base_url") == "FAKE_KEYED":
            o["base_url"] = self.fake.url + "/v1?key=url-secret-777777"
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

    def _agent_with_loop(self, loop, sigint=False, agents=None):
        """Runs the agent whose reading loop does `loop` after the first text delta (agent.lua's
        SEER_TEST_LOOP) against a stream that stalls, or `agents` of them under run_agents (the
        first one's on_message spins); returns (process, stdout, stderr, transcript path)."""
        self.fake = FakeProvider([{"sse": "anthropic_long.sse", "stall_after": 2000, "stall_s": 30}]).start()
        path = os.path.join(self.dir, "t.jsonl")
        extra = {"SEER_TEST_AGENTS": str(agents)} if agents else {}
        proc = subprocess.Popen([seertest.SEER, AGENT], cwd=self.dir, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=seertest.env(ANTHROPIC_BASE_URL=self.fake.url, ANTHROPIC_API_KEY=KEY,
                                                 SEER_TEST_LOOP=loop, **extra,
                                                 SEER_TEST_AGENT=json.dumps({"transcript": path, "mcp": not agents})))
        try:
            if sigint:
                # the loop spins in the script's own code (not in the harness): the interrupt lands there
                seen = []
                while not seen or seen[-1] not in ("SPINNING\n", ""):  # what came before it kept
                    seen.append(proc.stderr.readline())
                self.assertEqual(seen[-1], "SPINNING\n", "".join(seen))
                os.kill(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return proc, out, err, path

    def test_ctrl_c_in_the_reading_loop_ends_the_transcript_with_a_result(self):
        # Ctrl-C raised in the code that reads the agent's messages, outside any harness call:
        # the transcript still ends with the result (stop 56's CI caught the race in the test above)
        proc, _, err, path = self._agent_with_loop("spin", sigint=True)
        self.assertEqual(proc.returncode, 130, err)
        _, events = read_transcript(path)
        self.assertEqual(events[0]["type"], "run_start")
        self.assertEqual((events[-1]["type"], events[-1]["reason"], events[-1]["error"]),
                         ("result", "interrupted", "interrupted"))
        self.assertEqual(sum(e["type"] == "result" for e in events), 1)

    def test_an_error_in_the_reading_loop_ends_the_transcript_with_it(self):
        proc, _, err, path = self._agent_with_loop("error")
        _, events = read_transcript(path)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("the loop's own error", err)
        self.assertEqual((events[-1]["type"], events[-1]["reason"]), ("result", "error"))
        self.assertIn("the loop's own error", events[-1]["error"])
        self.assertEqual(events[-2]["type"], "error")
        self.assertEqual(sum(e["type"] == "result" for e in events), 1)

    def test_os_exit_in_the_reading_loop_ends_the_transcript_with_a_result(self):
        proc, _, err, path = self._agent_with_loop("exit")
        self.assertEqual(proc.returncode, 3, err)
        _, events = read_transcript(path)
        self.assertEqual((events[-1]["type"], events[-1]["reason"]), ("result", "error"))
        self.assertIn("os.exit(3)", events[-1]["error"])
        self.assertEqual(sum(e["type"] == "result" for e in events), 1)

    def test_a_script_that_ends_with_its_agent_unfinished_ends_the_transcript_with_a_result(self):
        proc, out, err, path = self._agent_with_loop("keep")
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("ENDED", out)
        _, events = read_transcript(path)
        self.assertEqual((events[-1]["type"], events[-1]["reason"]), ("result", "error"))
        self.assertIn("abandoned", events[-1]["error"])
        self.assertNotIn("os.exit", events[-1]["error"])

    def test_ctrl_c_in_run_agents_ends_every_transcript_with_a_result(self):
        # the interrupt lands in the first agent's on_message; the second agent, streaming beside
        # it, gets its result too (it was closed without one)
        proc, _, err, path = self._agent_with_loop("spin", sigint=True, agents=2)
        self.assertEqual(proc.returncode, 130, err)
        for i in (1, 2):
            _, events = read_transcript(f"{path}.{i}")
            self.assertEqual(events[0]["type"], "run_start", i)
            self.assertEqual((events[-1]["type"], events[-1]["reason"]), ("result", "interrupted"), i)
            self.assertEqual(sum(e["type"] == "result" for e in events), 1, i)

    def test_an_agent_left_unread_ends_its_transcript_when_collected(self):
        proc, out, err, path = self._agent_with_loop("break")
        _, events = read_transcript(path)
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("COLLECTED", out)
        self.assertEqual((events[-1]["type"], events[-1]["reason"]), ("result", "error"))
        self.assertIn("abandoned", events[-1]["error"])
        self.assertNotIn(KEY, json.dumps(events))

    def test_transcript_view(self):
        self.agent([{"sse": "anthropic_tool.sse"}, {"sse": "anthropic_final.sse"}], {"mcp": True})
        p = seertest.run(["transcript", "view", os.path.join(self.dir, "t.jsonl")])
        self.assertEqual(p.returncode, 0, p.stderr)
        for s in ["You are a test agent.", "I will echo.", "echo", "hello world", "All done.", "end_turn"]:
            self.assertIn(s, p.stdout)
        p = seertest.run(["transcript", "view", os.path.join(self.dir, "missing.jsonl")])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("missing.jsonl", p.stderr)


# A secret with characters JSON escapes ('"', '\\', '/'), so its escaped form differs from it.
SPLIT_SECRET = 'lab-SECRET/"q\\uote"-0123456789'


def sse_event(obj, event=None):
    head = f"event: {event}\n" if event else ""
    return head + "data: " + json.dumps(obj) + "\n\n"


def split_everywhere(s, sep):
    """s cut at every byte boundary: [s[:1], s[1:] + sep, s[:2], s[2:] + sep, ...]."""
    out = []
    for k in range(1, len(s)):
        out += [s[:k], s[k:] + sep]
    return out


def anthropic_split_stream(secret):
    """A turn whose text deltas and tool-argument deltas (input_json_delta, JSON-escaped) split
    the secret at every byte boundary, including inside an escape sequence."""
    ev = [sse_event({"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant",
                     "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None, "stop_sequence": None,
                     "usage": {"input_tokens": 5, "output_tokens": 1}}}, "message_start"),
          sse_event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                    "content_block_start")]
    for piece in ["key: "] + split_everywhere(secret, " | "):
        ev.append(sse_event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
                            "content_block_delta"))
    ev.append(sse_event({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    ev.append(sse_event({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_S",
                         "name": "echo", "input": {}}}, "content_block_start"))
    arg = json.dumps({"text": " ".join([secret] * 3)})  # the JSON text of the arguments
    esc = json.dumps(secret)[1:-1]
    i = arg.index(esc)
    pieces = [arg[:i]]
    # the escaped secret cut at every position of its escaped form, three times over
    for k in (3, len(esc) // 2, len(esc) - 2):
        pieces += [esc[:k], esc[k:] + " "]
    pieces[-1] = pieces[-1][:-1]
    pieces.append(arg[i + 3 * len(esc) + 2:])
    assert "".join(pieces) == arg, ("".join(pieces), arg)
    for p in pieces:
        ev.append(sse_event({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                             "partial_json": p}}, "content_block_delta"))
    ev.append(sse_event({"type": "content_block_stop", "index": 1}, "content_block_stop"))
    ev.append(sse_event({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                         "usage": {"output_tokens": 9}}, "message_delta"))
    ev.append(sse_event({"type": "message_stop"}, "message_stop"))
    return "".join(ev)


def openai_split_stream(secret):
    def chunk(delta, finish=None):
        return sse_event({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                          "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    ev = [chunk({"role": "assistant", "content": "key: "})]
    for piece in split_everywhere(secret, " | "):
        ev.append(chunk({"content": piece}))
    esc = json.dumps(secret)[1:-1]
    ev.append(chunk({"tool_calls": [{"index": 0, "id": "call_s", "type": "function",
                                     "function": {"name": "echo", "arguments": '{"text": "'}}]}))
    for k in range(1, len(esc)):  # every cut of the escaped form, in argument deltas
        for p in (esc[:k], esc[k:] + " "):
            ev.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
    ev.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"}'}}]}))
    # arguments that are not valid JSON reach the transcript as text (invalid_input)
    ev.append(chunk({"tool_calls": [{"index": 1, "id": "call_bad", "type": "function",
                                     "function": {"name": "echo", "arguments": '{"text": "' + esc[:5]}}]}))
    ev.append(chunk({"tool_calls": [{"index": 1, "function": {"arguments": esc[5:] + '" oops}'}}]}))
    ev.append(chunk({}, "tool_calls"))
    ev.append("data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                     "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 5}}) + "\n\n")
    ev.append("data: [DONE]\n\n")
    return "".join(ev)


class SecretRedactionTest(unittest.TestCase):
    """A secret split across streamed deltas (text and tool arguments, at every byte boundary,
    JSON-escaped) and echoed back by a tool never reaches the transcript, the output, or
    `seer transcript view`; the deltas still add up to the (redacted) message text."""

    setUp = HarnessCase.setUp
    tearDown = HarnessCase.tearDown
    agent = HarnessCase.agent

    def check_clean(self, secret):
        esc = json.dumps(secret)[1:-1]
        for form in (secret, esc):
            self.assertNotIn(form, self.text)
            self.assertNotIn(form, self.proc.stdout + self.proc.stderr)
        # nothing of it longer than a few bytes either: no delta kept a piece of it whole
        rest = self.text.replace(esc, "")
        for k in range(12, len(secret)):
            for i in range(0, len(secret) - k + 1):
                self.assertFalse(secret[i:i + k] in rest, f"a {k}-byte piece of the secret is in the transcript")
        view = seertest.run(["transcript", "view", self.transcript, "--full"], cwd=self.dir,
                            timeout=30, MY_LAB_TOKEN=secret)
        self.assertEqual(view.returncode, 0, view.stderr)
        self.assertNotIn(secret, view.stdout)
        self.assertIn("[REDACTED]", view.stdout)

    def deltas_match(self):
        deltas = "".join(e["text"] for e in self.events if e["type"] == "text_delta")
        texts = [b["text"] for e in self.events if e["type"] == "assistant"
                 for b in e["message"]["content"] if b["type"] == "text"]
        self.assertEqual(deltas, texts[0] + "".join(texts[1:]))
        self.assertEqual(texts[0].count("[REDACTED]"), len(SPLIT_SECRET) - 1)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_anthropic_split_deltas(self):
        sse = self.write("split.sse", anthropic_split_stream(SPLIT_SECRET))
        for chunk in (None, 7):  # whole events, and events cut across reads
            r = {"sse": sse}
            if chunk:
                r["chunk"] = chunk
            self.transcript = os.path.join(self.dir, f"t{chunk}.jsonl")
            self.agent([r, {"sse": "anthropic_final.sse"}], {"mcp": True, "secrets": ["MY_LAB_TOKEN"],
                                                             "transcript": self.transcript},
                       env={"MY_LAB_TOKEN": SPLIT_SECRET})
            self.check_clean(SPLIT_SECRET)
            self.deltas_match()
            res = [e for e in self.events if e["type"] == "tool_result"][0]
            self.assertEqual(res["content"][0]["text"], " ".join(["[REDACTED]"] * 3))
            call = [e for e in self.events if e["type"] == "tool_call"][0]
            self.assertEqual(call["input"], {"text": " ".join(["[REDACTED]"] * 3)})
            # the provider got the real text back (the model saw it); only disk is redacted
            sent = json.dumps(self.fake.requests[1]["body"])
            self.assertIn(json.dumps(SPLIT_SECRET)[1:-1], sent)
            self.fake.stop()

    def test_openai_split_deltas(self):
        sse = self.write("split.sse", openai_split_stream(SPLIT_SECRET))
        self.transcript = os.path.join(self.dir, "t.jsonl")
        self.agent([{"sse": sse, "chunk": 5}, {"sse": "openai_final.sse"}],
                   {"mcp": True, "provider": "openai", "model": "m", "base_url": "FAKE", "prompt": "sys",
                    "secrets": ["MY_LAB_TOKEN"]}, env={"OPENAI_API_KEY": None, "MY_LAB_TOKEN": SPLIT_SECRET})
        self.check_clean(SPLIT_SECRET)
        self.deltas_match()
        calls = {e["id"]: e for e in self.events if e["type"] == "tool_call"}
        self.assertNotIn(SPLIT_SECRET, calls["call_s"]["input"]["text"])
        self.assertIn("[REDACTED]", calls["call_bad"]["invalid_input"])

    def test_control_without_the_secret_declared(self):
        # The same stream with the secret not declared: it lands in the transcript, so the
        # probe above would see a leak if redaction did not happen.
        sse = self.write("split.sse", anthropic_split_stream(SPLIT_SECRET))
        self.agent([{"sse": sse}, {"sse": "anthropic_final.sse"}], {"mcp": True})
        self.assertIn(json.dumps(SPLIT_SECRET)[1:-1], self.text)

    def test_secret_in_base_url_and_error(self):
        # A key in the base URL's query reaches error messages that quote the URL.
        self.agent([{"status": 400, "json": {"type": "error", "error": {"type": "invalid_request_error",
                     "message": "bad key in https://x/?key=url-secret-777777"}}}],
                   {"provider": "openai", "model": "m", "base_url": "FAKE_KEYED", "prompt": "sys", "max_retries": 0},
                   env={"OPENAI_API_KEY": None}, check=False)
        self.assertNotIn("url-secret-777777", self.text)
        self.assertNotIn("url-secret-777777", self.proc.stdout + self.proc.stderr)


if __name__ == "__main__":
    unittest.main()
