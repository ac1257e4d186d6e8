/* The MCP client: starts or reaches the MCP servers of an agent-style configuration
 * ({name: {type = "stdio", command, args, env, cwd} | {type = "http", url, headers}}),
 * initializes each, lists their tools and calls them, with a deadline on every request. A
 * server that crashes, hangs or sends garbage becomes an error that names it; the other
 * servers keep working. The Lua face is seer.core.mcp (lua_mcp.c) under lua/seer/mcp/client.lua.
 *
 * Threads: a client (and each server in it) belongs to one thread at a time; nothing here
 * takes a lock. Different clients are independent, so one client per thread is safe. */
#ifndef SEER_MCP_H
#define SEER_MCP_H

#include <stddef.h>

#include <cJSON.h>

#include "../seer.h"

/* The lifecycle versions the client speaks, newest first; it asks for the first and accepts a
 * server that answers with any of them. */
#define SEER_MCP_PROTOCOL_VERSION "2025-11-25"
#define SEER_MCP_PROTOCOL_VERSIONS "2025-11-25, 2025-06-18, 2025-03-26"

enum {
    SEER_MCP_ETIMEOUT = -20, /* the server did not answer in time (the request was cancelled) */
    SEER_MCP_EDEAD = -21,    /* the server exited, closed the connection or broke the protocol */
    SEER_MCP_ERPC = -22,     /* the server answered with a JSON-RPC error */
    SEER_MCP_ESESSION = -23, /* internal: HTTP 404 for the session (the client re-initializes once; callers see SEER_EIO) */
};

typedef struct seer_mcp_client seer_mcp_client_t;

typedef struct seer_mcp_callbacks {
    void *ud;
    /* Polled (about every 100 ms) while waiting; non-zero ends the wait with SEER_EINTR after
     * the request is cancelled. The Lua binding passes seer_host_interrupted (Ctrl-C). */
    int (*interrupted)(void *ud);
    /* Server notifications other than the progress of the current call (logging messages,
     * list changes, ...). params may be NULL. A non-zero return is ignored. */
    void (*notification)(void *ud, const char *server, const char *method, const cJSON *params);
    /* Things worth telling a person that are not errors (a non-JSON line on a server's stdout,
     * a response nobody waits for). NULL: printed to stderr as "seer: mcp server 'x': ...". */
    void (*warning)(void *ud, const char *server, const char *text);
} seer_mcp_callbacks_t;

typedef struct seer_mcp_opts {
    int timeout_ms;         /* default deadline of every request; 0: 60 s */
    int connect_timeout_ms; /* start + initialize + first tools/list; 0: 30 s */
    /* Stdio servers' stderr is always kept (its last 4 KB end crash messages); with tee it is
     * also copied to seer's stderr, each line prefixed with "[server] ". */
    int stderr_tee;
    size_t max_message_bytes; /* one JSON-RPC message; 0: 64 MiB */
    /* The most the client holds of a tools/call response (0: max_message_bytes): its bytes, and
     * 16 more for each JSON value in it. The client never holds more of any message that arrives
     * while a call is awaited: past the bound the rest is read and thrown away as it streams.
     * A response cut that way is still the call's result, made of what was read (an open text
     * cut at a character, a block or structuredContent the cut went through left out, isError
     * as the whole response says), with a text block saying so and "seer_cut": {message_bytes,
     * read_bytes, content_bytes (the bytes of every block's text and data), max_result_bytes}.
     * Notifications and requests past it are dropped with a warning. A message past
     * max_message_bytes breaks the connection, as for every other request. */
    size_t max_result_bytes;
    /* One server's tool list (every page together): at most this many tools (0: 1000) taking
     * at most this many bytes of JSON, names, descriptions and schemas (0: 4 MiB); a server
     * past either is refused, at connect or when it lists its tools again. */
    size_t max_tools;
    size_t max_tools_bytes;
    seer_mcp_callbacks_t cb;
} seer_mcp_opts_t;

/* A tool of one server as the client offers it. qualified_name is unique across the client's
 * servers and safe as an LLM tool name ([A-Za-z0-9_-], at most 64 bytes): the tool's own name
 * when no other server has a tool of that name, else "<server>__<tool>"; characters outside
 * the set become '_' and a name that still clashes gets "_2", "_3", ... . tool is the server's
 * whole tool object (inputSchema, description, annotations, ...). Valid until the next call
 * that may refresh the list (seer_mcp_tools) or seer_mcp_close. */
typedef struct seer_mcp_tool {
    const char *server;
    const char *name;
    const char *qualified_name;
    const cJSON *tool;
} seer_mcp_tool_t;

/* Per-call options. progress (if set) receives the call's notifications/progress. */
typedef struct seer_mcp_call_opts {
    int timeout_ms; /* 0: the client's timeout */
    void (*progress)(void *ud, const char *server, double progress, double total /* NAN if none */,
                     const char *message /* NULL if none */);
    void *progress_ud;
} seer_mcp_call_opts_t;

/* Starts every server of config (a JSON object of name -> server; a {"mcpServers": {...}}
 * wrapper is accepted too), initializes them in parallel and lists their tools. Any server
 * that fails makes the whole call fail with a message naming it; nothing is left running. */
int seer_mcp_connect(seer_mcp_client_t **out, const cJSON *config, const seer_mcp_opts_t *opts, seer_err_t *err);

/* Sends the shutdown the transport asks for (stdio: close stdin, wait, SIGTERM, SIGKILL; HTTP:
 * DELETE the session) and frees everything. NULL is fine. */
void seer_mcp_close(seer_mcp_client_t *c);

/* The tools of all servers, re-listed first for servers that said their list changed. */
int seer_mcp_tools(seer_mcp_client_t *c, const seer_mcp_tool_t **tools, size_t *n, seer_err_t *err);

/* tools/call by qualified name (or "<server>__<tool>", or a bare name that only one server
 * has). On success *result is the server's result object ({content[], structuredContent?,
 * isError}), the caller's to cJSON_Delete. A tool that fails is a result with isError, not an
 * error; errors are timeouts (SEER_MCP_ETIMEOUT), dead servers (SEER_MCP_EDEAD), JSON-RPC
 * errors (SEER_MCP_ERPC), Ctrl-C (SEER_EINTR) and unknown names (SEER_ENOTFOUND). */
int seer_mcp_call(seer_mcp_client_t *c, const char *qualified_name, const cJSON *arguments,
                  const seer_mcp_call_opts_t *opts, cJSON **result, seer_err_t *err);

/* The same with the server and the tool's own name. arguments may be NULL ({}). */
int seer_mcp_call_tool(seer_mcp_client_t *c, const char *server, const char *tool, const cJSON *arguments,
                       const seer_mcp_call_opts_t *opts, cJSON **result, seer_err_t *err);

/* Any other request (resources/list, prompts/get, ping, ...). params may be NULL. */
int seer_mcp_request(seer_mcp_client_t *c, const char *server, const char *method, const cJSON *params,
                     int timeout_ms, cJSON **result, seer_err_t *err);

/* The servers, in the order of the configuration. */
size_t seer_mcp_server_count(const seer_mcp_client_t *c);
typedef struct seer_mcp_server_info {
    const char *name;
    const char *transport;        /* "stdio" or "http" */
    const char *protocol_version; /* negotiated */
    const cJSON *server_info;     /* the server's serverInfo, or NULL */
    const cJSON *capabilities;    /* or NULL */
    const char *instructions;     /* or NULL */
    int pid;                      /* stdio: the child's pid while it runs, else 0 */
    const char *dead;             /* why the server cannot be used any more, or NULL */
} seer_mcp_server_info_t;
int seer_mcp_server_info(const seer_mcp_client_t *c, size_t i, seer_mcp_server_info_t *info);

#endif
