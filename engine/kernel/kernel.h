/* seer kernel: a Jupyter kernel (protocol 5.3) for Lua. The transport is C (kernel.c: the five
 * sockets, signatures, the heartbeat and control threads, status messages, output streams,
 * interrupts); the interpreter is Lua (lua/seer/kernel.lua: execute, complete, inspect,
 * is_complete, history), so this side never knows what a cell means. install.c writes the
 * kernelspec that tells Jupyter how to start it. */
#ifndef SEER_KERNEL_H
#define SEER_KERNEL_H

/* `seer kernel -f CONNECTION_FILE` and `seer kernel install [...]`; argv[0] is "kernel".
 * Returns the process exit status. */
int seer_kernel_main(int argc, char **argv);

/* `seer kernel install [--user | --prefix P] [--name N] [--display-name T]
 * [--interrupt-mode signal|message]`; argv[0] is "install". */
int seer_kernel_install(int argc, char **argv);

#endif
