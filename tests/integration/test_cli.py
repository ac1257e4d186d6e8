"""The seer command line as a user drives it: scripts with arguments, -e, stdin, errors with
tracebacks and exit codes, help, unknown commands, module search paths, Ctrl-C, install."""
import os
import re
import signal
import subprocess
import time
import unittest

import seertest
from seertest import ROOT, SEER, env, run, tmpdir


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


class CliTest(unittest.TestCase):
    def test_version(self):
        r = run(["--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(ROOT, "VERSION")) as f:
            version = f.read().strip()
        self.assertRegex(r.stdout, rf"^seer {version} \(git ([0-9a-f]+|unknown)(-dirty)?\), LuaJIT 2\.1")
        self.assertEqual(run(["version"]).stdout, r.stdout)

    def test_extra_arguments_are_usage_errors(self):
        # `seer version extra`, `seer --version extra` and `seer model info PATH extra` ignored
        # what followed without a word
        model = os.path.join(ROOT, "tests", "fixtures", "models", "stories260K")
        for argv, msg in [
            (["version", "extra"], "seer version: takes no arguments; unexpected argument 'extra'"),
            (["--version", "extra"], "seer --version: takes no arguments; unexpected argument 'extra'"),
            (["model", "info", model, "extra"], "seer model: info takes one PATH (or --devices); unexpected argument 'extra'"),
            (["model", "info", "--devices", "extra"], "unexpected argument 'extra'"),
            # these exited 1 with a Lua traceback
            (["notebook", "bogus"], 'unknown command "bogus"'),
            (["sandboxd"], "--connection-file is required"),
            (["mcp", "notebook", "--http", "127.0.0.1:0", "--token", "short"], "--token must be at least 16 characters"),
        ]:
            r = run(argv, timeout=20)
            self.assertEqual(r.returncode, 2, (argv, r.stdout, r.stderr))
            self.assertIn(msg, r.stderr)
            self.assertIn("usage: seer ", r.stderr)
            self.assertNotIn("traceback", r.stderr)
            self.assertEqual(r.stdout, "")
        self.assertIn("usage: seer version", run(["version", "--help"]).stdout)

    def test_a_command_without_its_subcommand_is_a_usage_error(self):
        # `seer mcp`, `seer model`, ... printed their usage and exited 0 while `seer replay` and
        # `seer serve` exited 2: a missing subcommand is a usage error (stderr, 2); asking for
        # the usage (--help, help) is not (stdout, 0)
        for cmd in ["mcp", "model", "notebook", "hub", "sandbox", "transcript", "rpc", "replay", "serve"]:
            r = run([cmd], timeout=20)
            self.assertEqual(r.returncode, 2, (cmd, r.stdout, r.stderr))
            self.assertIn("usage: seer " + cmd, r.stderr)
            self.assertEqual(r.stdout, "", cmd)
            # replay and serve take a path first (`seer serve help` is a model folder named help)
            for ask in (["--help"], ["help"]) if cmd not in ("replay", "serve") else (["--help"],):
                r = run([cmd] + ask, timeout=20)
                self.assertEqual(r.returncode, 0, (cmd, ask, r.stderr))
                self.assertIn("usage: seer " + cmd, r.stdout)
            r = run(["help", cmd], timeout=20)
            self.assertEqual(r.returncode, 0, (cmd, r.stderr))
            self.assertIn("usage: seer " + cmd, r.stdout)

    def test_serve_a_missing_model_is_one_line_without_a_traceback(self):
        # it was a Lua traceback from serve.lua; `seer model info` already said it in one line
        r = run(["serve", "/nonexistent-model-dir"], timeout=20)
        self.assertEqual(r.returncode, 1, (r.stdout, r.stderr))
        self.assertEqual(r.stderr.strip().count("\n"), 0, r.stderr)
        self.assertIn("seer serve: seer.model.load: /nonexistent-model-dir is not a model directory", r.stderr)
        self.assertNotIn("traceback", r.stderr)
        self.assertNotIn("serve.lua", r.stderr)

    def test_dash_e_json(self):
        r = run(["-e", 'print(require("seer.json").encode({a = 1}))'])
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, '{"a":1}\n', ""))

    def test_dash_e_arguments(self):
        r = run(["-e", "print(select('#', ...), arg[0], arg[1], arg[2], ...)", "x", "y"])
        self.assertEqual(r.stdout, "2\t=(command line)\tx\ty\tx\ty\n")

    def test_dash_e_without_code(self):
        r = run(["-e"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("-e needs a chunk of code", r.stderr)

    def test_script_arguments(self):
        d = tmpdir(self)
        s = write(f"{d}/args.lua", "print(arg[0], arg[1], arg[2], #arg, select('#', ...), ...)\nprint(arg[-1] ~= nil)\n")
        r = run([s, "one", "two words"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"{s}\tone\ttwo words\t2\t2\tone\ttwo words\ntrue\n")

    def test_script_from_stdin_dash(self):
        r = run(["-", "a"], input="print('stdin', ...)\n")
        self.assertEqual((r.returncode, r.stdout), (0, "stdin\ta\n"))

    def test_script_from_piped_stdin_without_args(self):
        r = run([], input="print(6 * 7)\n")
        self.assertEqual((r.returncode, r.stdout), (0, "42\n"))

    def test_runtime_error_exits_1_with_file_line_and_traceback(self):
        d = tmpdir(self)
        s = write(f"{d}/bad.lua", "local function inner()\n  error('kaboom')\nend\ninner()\n")
        r = run([s])
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{s}:2: kaboom", r.stderr)
        self.assertIn("stack traceback:", r.stderr)
        self.assertIn(f"{s}:2: in function 'inner'", r.stderr)
        self.assertIn(f"{s}:4: in main chunk", r.stderr)

    def test_error_with_table_value(self):
        r = run(["-e", "error(setmetatable({}, {__tostring = function() return 'custom!' end}))"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("custom!", r.stderr)
        r = run(["-e", "error({})"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("(error object is a table value)", r.stderr)

    def test_syntax_error_names_file_and_line(self):
        d = tmpdir(self)
        s = write(f"{d}/syntax.lua", "print('ok')\nlocal x = = 2\n")
        r = run([s])
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{s}:2:", r.stderr)
        self.assertEqual(r.stdout, "")

    def test_missing_script(self):
        r = run(["/nonexistent/x.lua"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot open /nonexistent/x.lua: No such file or directory", r.stderr)

    def test_directory_instead_of_script(self):
        d = tmpdir(self)
        r = run([d + "/"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("is a directory", r.stderr)
        self.assertIn("main.lua", r.stderr)

    def test_os_exit_status(self):
        self.assertEqual(run(["-e", "os.exit(7)"]).returncode, 7)

    def test_unknown_command_lists_valid_ones(self):
        r = run(["frobnicate"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command 'frobnicate'", r.stderr)
        self.assertIn("help", r.stderr)
        self.assertIn("version", r.stderr)

    def test_unknown_option(self):
        r = run(["--frob"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option '--frob'", r.stderr)
        self.assertIn("usage:", r.stderr)

    def test_number_flags_are_checked(self):
        # "--port abc" was read as no port: seer serve listened on a random one without a word
        model = os.path.join(ROOT, "tests", "fixtures", "models", "stories260K")
        for argv, msg in [
            (["serve", model, "--port", "abc"], "seer serve: --port needs a number, got 'abc'"),
            (["serve", model, "--max-tokens", "lots"], "seer serve: --max-tokens needs a number, got 'lots'"),
            (["serve", model, "--read-timeout", "0"], "seer serve: --read-timeout must be a number of seconds"),
            (["notebook", "serve", "--port", "1.5"], "seer notebook serve: --port needs a port number from 0 to 65535"),
            (["notebook", "serve", "--port", "99999"], "seer notebook serve: --port needs a port number from 0 to 65535"),
            (["notebook", "serve", "--max-output", "-5"], "seer notebook serve: --max-output needs a whole number"),
        ]:
            r = run(argv, timeout=20)
            self.assertEqual(r.returncode, 2, (argv, r.stdout, r.stderr))
            self.assertIn(msg, r.stderr)
            self.assertNotIn("traceback", r.stderr)
            self.assertEqual(r.stdout, "")

    def test_help(self):
        r = run(["help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage: seer FILE.lua", r.stdout)
        self.assertIn("version", r.stdout)
        r = run(["help", "version"])
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage: seer version", r.stdout)
        r = run(["help", "nope"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command 'nope'", r.stderr)
        self.assertEqual(run(["--help"]).stdout, run(["help"]).stdout)
        self.assertIn("usage: seer help", run(["help", "--help"]).stdout)

    def test_an_error_quoting_escape_sequences_is_shown_not_obeyed_on_a_terminal(self):
        # An error can carry what a sandbox printed (a failed exec's output, a kernel's
        # traceback): on a terminal its control characters are written as text, into a pipe as
        # they are. The REPL's errors go the same way.
        code = 'error("failed: \\27]52;c;cm0gLXJmIH4=\\7\\27[2J\\194\\155x\\n\\tnext")'
        p = seertest.Pty(["-e", code])
        p.expect(r"failed: \\x1b\]52;c;cm0gLXJmIH4=\\x07\\x1b\[2J\\u009bx\r?\n\tnext")
        self.assertEqual(p.wait(), 1)
        self.assertNotIn(b"\x1b", p.buf)
        self.assertNotIn(b"\x07", p.buf)
        r = run(["-e", code])
        self.assertEqual(r.returncode, 1)
        self.assertIn("failed: \x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u009bx\n\tnext", r.stderr)
        p = seertest.Pty([])
        p.expect(r"> ")
        p.send(code.encode() + b"\n")
        p.expect(r"failed: \\x1b\]52")
        p.expect(r"> ")
        p.send(b"\x04")
        p.wait()
        self.assertNotIn(b"\x1b]", p.buf)
        # a bidi override reorders what is shown, a lone 0x9B is CSI on a Latin-1 terminal: both
        # as text; a well-formed character stays
        p = seertest.Pty(["-e", 'error("rm -rf \\226\\128\\174txt.sgol \\155 \\195\\169", 0)'])
        p.expect(r"rm -rf \\u202etxt\.sgol \\x9b \xc3\xa9")
        self.assertEqual(p.wait(), 1)
        self.assertNotIn(b"\xe2\x80\xae", p.buf)

    def test_help_for_a_command_is_the_commands_own_help(self):
        # `seer help X` kept its own copies of each command's usage, which fell behind what the
        # commands take (`seer help model` lacked --device, `seer help mcp` the local and rpc
        # options); now it prints what `seer X --help` prints.
        commands = re.findall(r"^  (\w+) ", run(["help"]).stdout, re.M)
        self.assertGreaterEqual(len(commands), 12, commands)
        for c in commands:
            if c == "version":
                continue
            h, own = run(["help", c], timeout=20), run([c, "--help"], timeout=20)
            self.assertEqual(h.returncode, 0, (c, h.stderr))
            self.assertIn("usage: seer " + c, h.stdout)
            self.assertEqual(h.stdout, own.stdout, c)
        self.assertIn("--device", run(["help", "model"]).stdout)
        self.assertIn("--interrupt-mode", run(["help", "kernel"]).stdout)

    def test_script_requires_its_own_modules_and_libraries(self):
        d = tmpdir(self)
        write(f"{d}/exp/helper.lua", "return {v = 'helper'}\n")
        write(f"{d}/exp/libraries/mylib.lua", "return {v = 'lib'}\n")
        write(f"{d}/exp/libraries/pkg/init.lua", "return {v = 'pkg'}\n")
        s = write(f"{d}/exp/main.lua",
                  "print(require('helper').v, require('mylib').v, require('pkg').v)\n"
                  "print(seer.script_dir())\n")
        r = run([s], cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"helper\tlib\tpkg\n{os.path.realpath(d)}/exp\n")

    def test_script_cannot_shadow_seer_modules(self):
        d = tmpdir(self)
        write(f"{d}/seer/json.lua", "return {encode = function() return 'shadowed' end}\n")
        s = write(f"{d}/main.lua", "print(require('seer.json').encode({1}))\n")
        r = run([s])
        self.assertEqual(r.stdout, "[1]\n", r.stderr)

    def test_missing_lua_tree_is_a_clear_error(self):
        r = run(["-e", "print(1)"], SEER_LUA_DIR="/nonexistent")
        self.assertEqual(r.returncode, 1)
        self.assertIn("SEER_LUA_DIR=/nonexistent does not hold seer's Lua tree", r.stderr)

    def test_sigint_interrupts_interpreted_script(self):
        d = tmpdir(self)
        s = write(f"{d}/spin.lua", "jit.off()\nprint('started') io.stdout:flush()\nlocal n = 0\nwhile true do n = n + 1 end\n")
        p = subprocess.Popen([SEER, s], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.assertEqual(p.stdout.readline(), "started\n")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 130, err)
        # The signal lands wherever the script is: on the loop or the line before it.
        self.assertRegex(err, rf"{s}:[34]: interrupted")
        # where it was, in one line: a traceback read like a crash (SEER_TRACEBACK=1 gives it)
        self.assertNotIn("stack traceback:", err)
        p = subprocess.Popen([SEER, s], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env(SEER_TRACEBACK="1"),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.assertEqual(p.stdout.readline(), "started\n")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("stack traceback:", err)

    def test_repeated_sigint_stops_jit_compiled_loop(self):
        # LuaJIT's compiled traces never check hooks, so the first Ctrl-C cannot stop this loop;
        # the second warns and the third must end the process instead of leaving it spinning.
        p = subprocess.Popen([SEER, "-e", "print('started') io.stdout:flush() while true do end"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.assertEqual(p.stdout.readline(), "started\n")
        time.sleep(0.3)
        for _ in range(3):
            if p.poll() is not None:
                break
            p.send_signal(signal.SIGINT)
            time.sleep(0.3)
        out, err = p.communicate(timeout=10)
        self.assertIn(p.returncode, (-signal.SIGINT, 130), err)


class InstallTest(unittest.TestCase):
    def test_installed_seer_works_from_any_directory(self):
        d = tmpdir(self)
        prefix = os.path.join(d, "prefix")
        build = os.environ.get("SEER_BUILD", "build")
        r = subprocess.run(["make", "-s", "-C", ROOT, "install", f"PREFIX={prefix}", f"BUILD={build}"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        seer = os.path.join(prefix, "bin", "seer")
        self.assertTrue(os.path.isfile(os.path.join(prefix, "share", "seer", "lua", "seer", "init.lua")))
        self.assertTrue(os.path.isfile(os.path.join(prefix, "share", "doc", "seer", "README.md")))
        e = env(SEER_LUA_DIR=None)
        r = subprocess.run([seer, "-e", 'print(require("seer.json").encode({a = 1}), seer.toolkit_dir)'],
                           capture_output=True, text=True, cwd="/", env=e, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, '{"a":1}\t' + os.path.realpath(prefix) + "/share/seer/lua/toolkit\n")


if __name__ == "__main__":
    unittest.main()
