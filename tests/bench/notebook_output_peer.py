"""make bench peer for tests/bench/notebook_output.lua: the same outputs through ipykernel,
driven by nbclient (the library jupyter nbconvert --execute and papermill use), in this
process. Prints stream MB/s, display messages/s and this process's peak RSS (the client holds
the notebook, as seer's notebook server does). Usage: notebook_output_peer.py MIB DISPLAYS"""
import resource
import sys
import time

try:
    import nbclient
    import nbformat
except ImportError as e:
    print(f"  peer skipped: {e} (Debian's python3-nbclient; make setup installs it)")
    sys.exit(0)

mib, nd = int(sys.argv[1]), int(sys.argv[2])
stream = ("import sys\nl = 'x' * 1013 + '\\n'\nw = sys.stdout.write\n"
          f"for i in range({mib} * 1024):\n    w('%09d ' % (i + 1) + l)\n")
disp = f"from IPython.display import display\nfor i in range({nd}):\n    display(i + 1)\n"
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1"), nbformat.v4.new_code_cell(stream),
                                     nbformat.v4.new_code_cell(disp)])
# iopub_timeout: nbclient stops reading outputs 4 s after the execute_reply by default (and
# keeps what it had), which under load loses the tail of a large output; wait for all of it.
client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=3600, iopub_timeout=3600)
with client.setup_kernel():
    client.execute_cell(nb.cells[0], 0)
    t0 = time.monotonic()
    client.execute_cell(nb.cells[1], 1)
    t_stream = time.monotonic() - t0
    rss_stream = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    kept = sum(len(o.get("text", "")) for o in nb.cells[1].outputs)
    t0 = time.monotonic()
    client.execute_cell(nb.cells[2], 2)
    t_disp = time.monotonic() - t0
got = sum(1 for o in nb.cells[2].outputs if o.get("output_type") == "display_data")
print(f"  ipykernel+nbclient: {mib} MiB of stdout   {t_stream:6.1f} s  {mib * 1.048576 / t_stream:7.1f} MB/s   "
      f"kept {kept // 1048576} MiB, client peak RSS {rss_stream} MiB")
print(f"  ipykernel+nbclient: {nd} display messages {t_disp:6.2f} s  {nd / t_disp:7.0f} messages/s ({got} kept)")
print(f"PEER_NB {mib * 1.048576 / t_stream} {nd / t_disp} {rss_stream} {mib}")
