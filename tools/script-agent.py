#!/usr/bin/env python3
"""Writes a scripted agent for an experiment's small profile: a transcript whose assistant turns
run the cells of a Lua file through the notebook tools, which the harness's replay provider
plays against a live session (docs/harness.md, Replay). Only the agent's side is recorded;
every output comes from the live run.

  tools/script-agent.py CELLS.lua OUT.jsonl [--markdown TEXT] [--final TEXT]

CELLS.lua holds the cells, each opened by a line `-- CELL: what the agent says before it`.

A multi-turn (interactive) agent: `-- REPLY: text` ends the agent's response with that text (its
turn ends; the user speaks next) and `-- USER: text` is what the user says then. The user's lines
go, in order and ending with /quit, to the file named by --user-turns (what the experiment's
scripted user types); the transcript records them as user events too (--user-message is the
first, the one the experiment sends itself)."""
import argparse
import json
import re

ap = argparse.ArgumentParser()
ap.add_argument("cells")
ap.add_argument("out")
ap.add_argument("--markdown", default=None, help="a final add_markdown cell")
ap.add_argument("--final", default="Done: the results are in the notebook.", help="the agent's last words")
ap.add_argument("--user-message", default="Begin.", help="the first user message (the experiment sends it)")
ap.add_argument("--user-turns", default=None, help="write the user's `-- USER:` lines here (interactive)")
a = ap.parse_args()

src = open(a.cells, encoding="utf-8").read()
parts = re.split(r"^-- (CELL|REPLY|USER):?[ \t]*(.*)\n", src, flags=re.M)
# (kind, text, code) in file order; REPLY and USER have no code
items = [(parts[i], parts[i + 1].strip(), parts[i + 2].strip() + "\n") for i in range(1, len(parts) - 2, 3)]
cells = [(t, c) for k, t, c in items if k == "CELL"]
if not cells:
    raise SystemExit(f"{a.cells}: no `-- CELL: note` lines")
for k, t, c in items:
    if k != "CELL" and c.strip():
        raise SystemExit(f"{a.cells}: code after `-- {k}: {t[:40]}`; open a cell with `-- CELL:` first")
    if k != "CELL" and not t:
        raise SystemExit(f"{a.cells}: an empty `-- {k}:` line; it needs the text")
users = [t for k, t, _ in items if k == "USER"]
if users and not a.user_turns:
    raise SystemExit(f"{a.cells}: has `-- USER:` lines; name the file for them with --user-turns")
S = "rec00001"
usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
ev = [{"type": "run_start", "provider": "claude", "model": "scripted", "system": "(scripted)", "tools": [],
       "mcp_sessions": {"notebook": S}},
      {"type": "user", "text": a.user_message}]
# the scripted turns: ("call", name, note, input) | ("end", text) | ("user", text)
turns = []
for k, t, c in items:
    if k == "CELL":
        turns.append(("call", "execute_code", t, {"session_id": S, "code": c}))
    elif k == "REPLY":
        turns.append(("end", t))
    else:
        if not turns or turns[-1][0] != "end":
            raise SystemExit(f"{a.cells}: `-- USER: {t[:40]}` must follow a `-- REPLY:` (the agent ends its turn first)")
        turns.append(("user", t))
if a.markdown:
    turns.append(("call", "add_markdown", None, {"session_id": S, "content": a.markdown}))
turns.append(("end", a.final))
n_turn, n_call = 0, 0
for t in turns:
    if t[0] == "user":
        ev.append({"type": "user", "text": t[1]})
        continue
    n_turn += 1
    if t[0] == "end":
        ev.append({"turn": n_turn, "type": "assistant", "stop_reason": "end_turn", "model": "scripted", "usage": usage,
                   "message": {"role": "assistant", "content": [{"type": "text", "text": t[1]}]}})
        continue
    _, name, note, inp = t
    n_call += 1
    content = ([{"type": "text", "text": note}] if note else []) + [
        {"type": "tool_use", "id": f"toolu_s{n_call:02d}", "name": name, "input": inp}]
    ev.append({"turn": n_turn, "type": "assistant", "stop_reason": "tool_use", "model": "scripted", "usage": usage,
               "message": {"role": "assistant", "content": content}})
with open(a.out, "w", encoding="utf-8") as f:
    for n, e in enumerate(ev, 1):
        f.write(json.dumps({"seq": n, "agent": "investigator", **e}) + "\n")
if a.user_turns:
    with open(a.user_turns, "w", encoding="utf-8") as f:
        f.write("".join(u + "\n" for u in users) + "/quit\n")
print(f"{a.out}: {n_call} tool calls" + (f", {len(users) + 1} user messages" if users else ""))
