#!/usr/bin/env python3
"""Writes a scripted agent for an experiment's small profile: a transcript whose assistant turns
run the cells of a Lua file through the notebook tools, which the harness's replay provider
plays against a live session (docs/harness.md, Replay). Only the agent's side is recorded;
every output comes from the live run.

  tools/script-agent.py CELLS.lua OUT.jsonl [--markdown TEXT] [--final TEXT]

CELLS.lua holds the cells, each opened by a line `-- CELL: what the agent says before it`."""
import argparse
import json
import re

ap = argparse.ArgumentParser()
ap.add_argument("cells")
ap.add_argument("out")
ap.add_argument("--markdown", default=None, help="a final add_markdown cell")
ap.add_argument("--final", default="Done: the results are in the notebook.", help="the agent's last words")
a = ap.parse_args()

src = open(a.cells, encoding="utf-8").read()
parts = re.split(r"^-- CELL:?[ \t]*(.*)\n", src, flags=re.M)
cells = [(parts[i].strip(), parts[i + 1].strip() + "\n") for i in range(1, len(parts) - 1, 2)]
if not cells:
    raise SystemExit(f"{a.cells}: no `-- CELL: note` lines")
S = "rec00001"
usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
ev = [{"type": "run_start", "provider": "claude", "model": "scripted", "system": "(scripted)", "tools": [],
       "mcp_sessions": {"notebook": S}},
      {"type": "user", "text": "Begin."}]
turns = [("execute_code", note, {"session_id": S, "code": code}) for note, code in cells]
if a.markdown:
    turns.append(("add_markdown", None, {"session_id": S, "content": a.markdown}))
for i, (name, note, inp) in enumerate(turns, 1):
    content = ([{"type": "text", "text": note}] if note else []) + [
        {"type": "tool_use", "id": f"toolu_s{i:02d}", "name": name, "input": inp}]
    ev.append({"turn": i, "type": "assistant", "stop_reason": "tool_use", "model": "scripted", "usage": usage,
               "message": {"role": "assistant", "content": content}})
ev.append({"turn": len(turns) + 1, "type": "assistant", "stop_reason": "end_turn", "model": "scripted", "usage": usage,
           "message": {"role": "assistant", "content": [{"type": "text", "text": a.final}]}})
with open(a.out, "w", encoding="utf-8") as f:
    for n, e in enumerate(ev, 1):
        f.write(json.dumps({"seq": n, "agent": "investigator", **e}) + "\n")
print(f"{a.out}: {len(turns)} tool calls")
