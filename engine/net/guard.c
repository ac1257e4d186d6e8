/* The ZMTP guard: what a hostile peer can make a seer socket hold (docs/security.md, class 6).
 *
 * libzmq bounds one frame (ZMQ_MAXMSGSIZE) and a number of complete messages (ZMQ_RCVHWM), but
 * not a message: it delivers a multipart message whole, so it keeps every frame of one until the
 * last arrives, and the high-water mark counts complete messages only. A peer that speaks ZMTP
 * itself (a kernel, sandboxd or RPC server in a sandbox can: it binds the socket the host
 * connects to) sends frame after frame with the MORE flag and never the last: the receiver grows
 * without bound before seer sees a byte (3,000 frames of 1 MB took a receiver to 2.9 GB).
 *
 * So a socket with limits does not connect to such a peer itself. Its connect goes to a listener
 * of this process (a unix socket in a private 0700 folder, accepting only this process), and one
 * thread carries the bytes between that connection and the real endpoint, reading the peer's
 * ZMTP framing as it goes: greeting (version 3, NULL mechanism), commands (at most 64 KiB each),
 * and messages (at most max_bytes over all frames and max_frames frames). A peer that breaks a
 * bound loses the connection at once (both ends closed, nothing of the offending message passed
 * on but what came before it, which libzmq discards as an incomplete message); the socket
 * reconnects through the guard as libzmq does after any disconnect. The thread reads from the
 * peer only while it has room to pass on, so libzmq's high-water mark still pushes back.
 *
 * Connecting to an ipc:// endpoint opens the socket file O_PATH|O_NOFOLLOW and connects through
 * /proc/self/fd: a link planted at the path is refused, not followed (libzmq follows it).
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "net.h"

#define BUF_CAP (256 * 1024)
#define MAX_COMMAND 65536
#define GREETING 64
/* Peers one guarded bind or relay carries at once (three descriptors and up to 512 KiB each):
 * anyone who reaches its endpoint could otherwise connect in a loop until this process has no
 * descriptors (or memory) left. Past it a new connection is accepted and closed at once. */
#define MAX_PEERS SEER_NET_GUARD_MAX_PEERS

typedef struct pair pair_t;

enum { EP_WAKE = 1, EP_LISTEN, EP_DOWN, EP_UP };

typedef struct ep {
    int kind;
    void *owner;
} ep_t;

typedef struct guard {
    ep_t lep;
    int lfd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    /* the real endpoint */
    int ipc, abstract;
    int bind_mode; /* the guard listens at the endpoint for peers; libzmq binds at path */
    int relay;     /* the guard listens at path for anyone there and connects each to the endpoint */
    int keep_path; /* path lies in a folder another side controls: never removed through it */
    char up_path[4096];
    /* a connect (or relay) beneath a root (seer_net_guard_open_beneath, _relay_beneath): the
     * root, opened once (trusted), and the socket's path below it, walked on every connect with
     * no link followed (a folder swapped for a link later is refused too); -1 otherwise */
    int up_dirfd;
    char up_rel[4096];
    struct sockaddr_storage up_addr;
    socklen_t up_len;
    size_t max_bytes, max_frames;
    atomic_ulong cuts;
    /* since when (monotonic ms) the real endpoint refuses the connects tried; 0 while one is up */
    atomic_llong down_since;
    pthread_mutex_t why_mu;
    char why[160];
    atomic_int closing;
    /* after a peer was cut, the next connect waits (100 ms doubling to 5 s; a whole message
     * passing resets it): a peer that breaks the bounds on every reconnect costs little */
    int cut_ms;
    long long hold_until;
    int in_epoll;
    long long accept_hold_until; /* out of descriptors: the listener rests until then */
    int npairs;
    pair_t *pairs;
    struct guard *next;
} guard_t;

typedef struct buf {
    unsigned char *b;
    size_t off, len;
} buf_t;

struct pair {
    guard_t *g;
    ep_t dep, uep;
    int down, up, connecting, dead, up_eof; /* up_eof: the peer ended; what it sent still goes on */
    int zmq_heard; /* bind mode: libzmq has accepted down's connection (its first bytes came) */
    long long retry_at; /* up < 0: when to try the real endpoint again (ms, monotonic) */
    int retry_ms;
    buf_t d2u, u2d;
    unsigned dmask, umask; /* the events each fd is registered for */
    /* the peer's framing */
    unsigned char greet[GREETING];
    int greet_have;
    unsigned char hdr[9];
    int hdr_have, hdr_need;
    uint64_t body_left;
    int in_body, is_cmd, more;
    uint64_t msg_bytes, msg_frames;
    pair_t *next;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_epoll = -1, g_wake = -1, g_start_errno;
static guard_t *g_guards;
static char g_dir[256];
static unsigned long g_serial;
static ep_t g_wake_ep = {EP_WAKE, NULL};

static void remove_dir(void) {
    if (!g_dir[0]) return;
    pthread_mutex_lock(&g_mu);
    for (guard_t *g = g_guards; g; g = g->next)
        if (!g->keep_path) unlink(g->path);
    pthread_mutex_unlock(&g_mu);
    rmdir(g_dir);
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Records why the guard refused something: counted, and one line on stderr (rate-limited
 * there). A refusal that repeats the last one (a planted link tried again after each back-off)
 * is neither counted nor logged again. */
static void note(guard_t *g, const char *why, int repeatable) {
    pthread_mutex_lock(&g->why_mu);
    int same = !repeatable && strcmp(g->why, why) == 0;
    if (!same) snprintf(g->why, sizeof g->why, "%s", why);
    pthread_mutex_unlock(&g->why_mu);
    if (same) return;
    atomic_fetch_add(&g->cuts, 1);
    seer_net_note_dropped(why);
}

static void cut(pair_t *p, const char *why) {
    if (p->dead) return;
    p->dead = 1;
    if (why) {
        guard_t *g = p->g;
        note(g, why, 1);
        g->cut_ms = g->cut_ms ? (g->cut_ms * 2 > 5000 ? 5000 : g->cut_ms * 2) : 100;
        g->hold_until = now_ms() + g->cut_ms;
    }
}

/* Out of the epoll set, then closed. A close alone does not remove it while another descriptor
 * shares the open file (a child between fork and exec holds copies of every descriptor), and
 * epoll would then report events with a pointer to memory freed here. */
static void drop_fd(int *fd) {
    if (*fd < 0) return;
    epoll_ctl(g_epoll, EPOLL_CTL_DEL, *fd, NULL);
    close(*fd);
    *fd = -1;
}

static void close_pair(pair_t *p) {
    p->g->npairs--;
    drop_fd(&p->down);
    drop_fd(&p->up);
    free(p->d2u.b);
    free(p->u2d.b);
    free(p);
}

/* Reads the peer's bytes in [b, b+n) into the framing state; 0 when they keep every bound. */
static int inspect(pair_t *p, const unsigned char *b, size_t n) {
    guard_t *g = p->g;
    char why[160];
    size_t i = 0;
    while (i < n) {
        if (p->greet_have < GREETING) {
            size_t k = GREETING - (size_t)p->greet_have;
            if (k > n - i) k = n - i;
            memcpy(p->greet + p->greet_have, b + i, k);
            p->greet_have += (int)k;
            i += k;
            if (p->greet_have >= 10 && (p->greet[0] != 0xff || !(p->greet[9] & 1))) {
                cut(p, "a peer that does not speak ZMTP 3 (its greeting); disconnected");
                return -1;
            }
            if (p->greet_have >= 11 && p->greet[10] < 3) {
                cut(p, "a peer that offered ZMTP before version 3; disconnected");
                return -1;
            }
            if (p->greet_have >= 32 && memcmp(p->greet + 12, "NULL\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 20) != 0) {
                cut(p, "a peer that asked for a security mechanism other than NULL; disconnected");
                return -1;
            }
            continue;
        }
        if (p->in_body) {
            uint64_t k = p->body_left < n - i ? p->body_left : n - i;
            p->body_left -= k;
            i += (size_t)k;
            if (p->body_left == 0) p->in_body = 0;
            continue;
        }
        /* a frame header: flags, then a 1- or 8-byte size */
        if (p->hdr_have == 0) {
            unsigned char f = b[i];
            if (f & 0xf8) {
                cut(p, "a ZMTP frame with reserved flags set; disconnected");
                return -1;
            }
            p->hdr_need = (f & 2) ? 9 : 2;
        }
        while (p->hdr_have < p->hdr_need && i < n) p->hdr[p->hdr_have++] = b[i++];
        if (p->hdr_have < p->hdr_need) break;
        unsigned char f = p->hdr[0];
        uint64_t size = 0;
        if (f & 2)
            for (int k = 1; k < 9; k++) size = (size << 8) | p->hdr[k];
        else
            size = p->hdr[1];
        p->hdr_have = 0;
        if (f & 4) { /* a command: READY, PING, PONG, ERROR, SUBSCRIBE; never part of a message */
            if (size > MAX_COMMAND || (f & 1)) {
                snprintf(why, sizeof why, "a ZMTP command of %llu bytes (at most %d)%s; disconnected",
                         (unsigned long long)size, MAX_COMMAND, (f & 1) ? " with the MORE flag" : "");
                cut(p, why);
                return -1;
            }
        } else {
            p->msg_frames++;
            /* checked before it is added: a size near 2^64 would wrap the sum below the limit */
            int too_big = size > g->max_bytes || p->msg_bytes > g->max_bytes - size;
            if (!too_big) p->msg_bytes += size;
            if (too_big || p->msg_frames > g->max_frames) {
                if (too_big)
                    snprintf(why, sizeof why, "a message of more than %zu bytes (this socket's max_bytes); disconnected",
                             g->max_bytes);
                else
                    snprintf(why, sizeof why, "a message of more than %zu frames (this socket's max_frames); disconnected",
                             g->max_frames);
                cut(p, why);
                return -1;
            }
            if (!(f & 1)) {
                p->msg_bytes = p->msg_frames = 0;
                g->cut_ms = 0; /* a whole message within the bounds */
            }
        }
        if (size) {
            p->in_body = 1;
            p->body_left = size;
        }
    }
    return 0;
}

/* Sets the events fd is watched for. No events means out of the epoll set: epoll reports a
 * hangup or an error whatever the mask, and a side with no room to read it into would be
 * reported again at once, forever (a peer that filled the buffer and closed spun this thread). */
static void set_mask(int fd, ep_t *e, unsigned *cur, unsigned want) {
    if (fd < 0 || *cur == want) return;
    struct epoll_event ev = {.events = want, .data.ptr = e};
    if (want == 0) epoll_ctl(g_epoll, EPOLL_CTL_DEL, fd, NULL);
    else epoll_ctl(g_epoll, *cur == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
    *cur = want;
}

static void update(pair_t *p) {
    unsigned d = 0, u = 0;
    if (p->d2u.len < BUF_CAP && !p->up_eof) d |= EPOLLIN;
    if (p->u2d.off < p->u2d.len) d |= EPOLLOUT;
    if (p->up < 0) u = 0;
    else if (p->connecting) u = EPOLLOUT;
    else if (p->up_eof) u = 0;
    else {
        if (p->u2d.len < BUF_CAP) u |= EPOLLIN;
        if (p->d2u.off < p->d2u.len) u |= EPOLLOUT;
    }
    set_mask(p->down, &p->dep, &p->dmask, d);
    set_mask(p->up, &p->uep, &p->umask, u);
}

/* Reads what fd has into b; returns 1 when something came or nothing is there yet, 0 at the end
 * of the stream or on an error. */
static int fill(int fd, buf_t *b, size_t *got, size_t *at) {
    *got = 0;
    if (b->off == b->len) b->off = b->len = 0;
    if (b->len == BUF_CAP && b->off > 0) {
        memmove(b->b, b->b + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len == BUF_CAP) return 1;
    if (at) *at = b->len; /* where the new bytes go: the buffer may have moved above */
    ssize_t r = read(fd, b->b + b->len, BUF_CAP - b->len);
    if (r > 0) {
        *got = (size_t)r;
        b->len += (size_t)r;
        return 1;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
    return 0;
}

static int drain(int fd, buf_t *b) {
    while (b->off < b->len) {
        ssize_t w = send(fd, b->b + b->off, b->len - b->off, MSG_NOSIGNAL);
        if (w > 0) {
            b->off += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
        return 0;
    }
    b->off = b->len = 0;
    return 1;
}

static void on_down(pair_t *p, unsigned ev) {
    size_t got;
    if (ev & EPOLLOUT && !drain(p->down, &p->u2d)) return cut(p, NULL);
    if (p->up_eof) {
        if (p->u2d.off == p->u2d.len) cut(p, NULL);
        return;
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        p->zmq_heard = 1;
        if (!fill(p->down, &p->d2u, &got, NULL)) return cut(p, NULL);
        if (p->up >= 0 && !p->connecting && !drain(p->up, &p->d2u)) return cut(p, NULL);
    }
}

static void on_up(pair_t *p, unsigned ev) {
    size_t got;
    if (p->connecting) {
        int e = 0;
        socklen_t el = sizeof e;
        if (getsockopt(p->up, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
            /* refused (not listening yet): libzmq's connection stays, with what it already sent,
             * and the guard tries again after its back-off */
            long long zero = 0;
            atomic_compare_exchange_strong(&p->g->down_since, &zero, now_ms());
            drop_fd(&p->up);
            p->connecting = 0;
            p->retry_ms = p->retry_ms ? (p->retry_ms * 2 > 1000 ? 1000 : p->retry_ms * 2) : 5;
            p->retry_at = now_ms() + p->retry_ms;
            return;
        }
        if (!(ev & EPOLLOUT)) return;
        p->connecting = 0;
        atomic_store(&p->g->down_since, 0);
        if (!drain(p->up, &p->d2u)) return cut(p, NULL);
        return;
    }
    if (ev & EPOLLOUT && !drain(p->up, &p->d2u)) return cut(p, NULL);
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        size_t before = 0;
        if (!fill(p->up, &p->u2d, &got, &before)) {
            /* what it sent before it went away still goes on (a kernel's last words) */
            p->up_eof = 1;
            drop_fd(&p->up); /* an ended stream would report itself forever */
            if (!drain(p->down, &p->u2d) || p->u2d.off == p->u2d.len) cut(p, NULL);
            return;
        }
        if (got && inspect(p, p->u2d.b + before, got) != 0) return;
        if (!drain(p->down, &p->u2d)) return cut(p, NULL);
    }
}

/* Opens rel below the folder rootfd with no link followed: each folder O_NOFOLLOW|O_DIRECTORY,
 * the last part O_PATH|O_NOFOLLOW (the caller checks it is a socket). -1 when it cannot: with
 * why set when a part is a link or not a folder (a refusal), not when it does not exist yet. */
static int walk_beneath(int rootfd, const char *rel, const char *shown, char *why, size_t wn) {
    int fd = rootfd;
    const char *p = rel;
    for (;;) {
        while (*p == '/') p++;
        const char *slash = strchr(p, '/');
        char comp[256];
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || n >= sizeof comp) break;
        memcpy(comp, p, n);
        comp[n] = 0;
        if (strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) break;
        int next = openat(fd, comp, slash ? (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : (O_PATH | O_NOFOLLOW | O_CLOEXEC));
        int e = errno;
        if (fd != rootfd) close(fd);
        if (next < 0) {
            if (e == ELOOP || e == ENOTDIR)
                snprintf(why, wn, "%.60s: %.30s on the way is a link or not a folder; not followed", shown, comp);
            return -1;
        }
        if (!slash) return next;
        fd = next;
        p = slash + 1;
    }
    if (fd != rootfd) close(fd);
    snprintf(why, wn, "%.80s: a bad path below its root", shown);
    return -1;
}

/* Opens the connection to the real endpoint (non-blocking); -1 with why set when it cannot. */
static int connect_up(guard_t *g, int *connecting, char *why, size_t wn) {
    *connecting = 0;
    int fam = g->ipc ? AF_UNIX : g->up_addr.ss_family;
    int s = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    struct sockaddr_un un;
    const struct sockaddr *sa = (const struct sockaddr *)&g->up_addr;
    socklen_t sl = g->up_len;
    int pf = -1;
    if (g->ipc && !g->abstract) {
        pf = g->up_dirfd >= 0 ? walk_beneath(g->up_dirfd, g->up_rel, g->up_path, why, wn)
                              : open(g->up_path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (pf < 0 || fstat(pf, &st) != 0 || !S_ISSOCK(st.st_mode)) {
            /* O_PATH|O_NOFOLLOW opens a link itself; ENOENT (not yet bound) is no refusal */
            if (pf >= 0 && !why[0])
                snprintf(why, wn, "%.80s is not a socket (%s); not followed", g->up_path,
                         S_ISLNK(st.st_mode) ? "a symbolic link" : "another kind of file");
            if (pf >= 0) close(pf);
            close(s);
            return -1;
        }
        memset(&un, 0, sizeof un);
        un.sun_family = AF_UNIX;
        snprintf(un.sun_path, sizeof un.sun_path, "/proc/self/fd/%d", pf);
        sa = (const struct sockaddr *)&un;
        sl = sizeof un;
    }
    int r = connect(s, sa, sl);
    int e = errno;
    if (pf >= 0) close(pf);
    if (r == 0) return s;
    if (e == EINPROGRESS && !g->ipc) {
        *connecting = 1;
        return s;
    }
    close(s);
    return -1;
}

/* Connects p to the real endpoint; when that fails (not bound yet, refused, a link planted
 * there), libzmq's connection stays open here and the guard tries again after a back-off of
 * 5 ms doubling to 1 s, as libzmq would. */
static void try_up(pair_t *p) {
    char why[160] = "";
    int connecting;
    long long now = now_ms();
    if (p->g->hold_until > now) { /* the last peer here was cut a moment ago */
        p->retry_at = p->g->hold_until;
        return;
    }
    int u = connect_up(p->g, &connecting, why, sizeof why);
    if (u < 0) {
        long long zero = 0;
        atomic_compare_exchange_strong(&p->g->down_since, &zero, now);
        if (why[0]) note(p->g, why, 0);
        p->retry_ms = p->retry_ms ? (p->retry_ms * 2 > 1000 ? 1000 : p->retry_ms * 2) : 5;
        p->retry_at = now_ms() + p->retry_ms;
        return;
    }
    p->up = u;
    p->connecting = connecting;
    p->retry_at = 0;
    if (!connecting) atomic_store(&p->g->down_since, 0);
    struct epoll_event ev = {.events = connecting ? EPOLLOUT : EPOLLIN, .data.ptr = &p->uep};
    epoll_ctl(g_epoll, EPOLL_CTL_ADD, u, &ev);
    p->umask = ev.events;
    if (!connecting && p->d2u.off < p->d2u.len && !drain(p->up, &p->d2u)) cut(p, NULL);
}

/* A new pair of g carrying down (this side's libzmq) and up (the peer; -1: not connected yet),
 * both in the epoll set; NULL (both closed) when memory runs out. */
static pair_t *new_pair(guard_t *g, int down, int up) {
    pair_t *p = calloc(1, sizeof *p);
    if (p) {
        p->d2u.b = malloc(BUF_CAP);
        p->u2d.b = malloc(BUF_CAP);
    }
    if (!p || !p->d2u.b || !p->u2d.b) {
        if (p) {
            free(p->d2u.b);
            free(p->u2d.b);
            free(p);
        }
        close(down);
        if (up >= 0) close(up);
        return NULL;
    }
    p->g = g;
    p->down = down;
    p->up = up;
    p->dep = (ep_t){EP_DOWN, p};
    p->uep = (ep_t){EP_UP, p};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &p->dep};
    epoll_ctl(g_epoll, EPOLL_CTL_ADD, down, &ev);
    p->dmask = EPOLLIN;
    if (up >= 0) {
        ev.data.ptr = &p->uep;
        epoll_ctl(g_epoll, EPOLL_CTL_ADD, up, &ev);
        p->umask = EPOLLIN;
    }
    p->next = g->pairs;
    g->pairs = p;
    g->npairs++;
    return p;
}

/* Whether this process has descriptors to spare for another pair: FD_SPARE of them can be
 * opened now (dup'ed from fd, then closed). Costs that many system calls per accepted peer. */
#define FD_SPARE 24
static int fds_to_spare(int fd) {
    int t[FD_SPARE], n = 0, ok = 1;
    for (; n < FD_SPARE; n++) {
        t[n] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (t[n] < 0) {
            ok = 0;
            break;
        }
    }
    while (n > 0) close(t[--n]);
    return ok;
}

/* Bind mode: at most this many pairs whose connection libzmq has not accepted yet. libzmq takes
 * a descriptor for each when its I/O thread gets to it, and aborts the process when it finds
 * none (ipc_listener.cpp asserts on EMFILE); fds_to_spare counts what is free when the guard
 * accepts, not what libzmq will take after, so with the guard's thread ahead of libzmq's (a
 * connect flood on a busy machine, a low descriptor limit) a burst of accepts could leave libzmq
 * none. Past this many the listener rests a few ms (the connections wait in its backlog). With
 * FD_SPARE 24 free at each accept, these 8 leave at least 14. */
#define GUARD_UNACCEPTED_MAX 8
static int unaccepted(const guard_t *g) {
    int n = 0;
    for (const pair_t *p = g->pairs; p; p = p->next) n += !p->zmq_heard && !p->dead;
    return n;
}

static void on_accept(guard_t *g) {
    for (;;) {
        if (g->bind_mode && unaccepted(g) >= GUARD_UNACCEPTED_MAX) {
            epoll_ctl(g_epoll, EPOLL_CTL_DEL, g->lfd, NULL);
            g->in_epoll = 0;
            g->accept_hold_until = now_ms() + 2;
            return;
        }
        int d = accept4(g->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (d < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* the connection stays in the backlog and the listener readable: without a rest
                 * this thread would spin on it until a descriptor frees */
                epoll_ctl(g_epoll, EPOLL_CTL_DEL, g->lfd, NULL);
                g->in_epoll = 0;
                g->accept_hold_until = now_ms() + 100;
                note(g, "out of descriptors: new connections wait", 0);
            }
            return;
        }
        if (!fds_to_spare(d)) {
            /* a pair takes two more descriptors here and, in bind mode, one in libzmq's accept,
             * which aborts the process when it finds none (ipc_listener.cpp: an assertion) */
            close(d);
            note(g, "out of descriptors: a new connection refused", 0);
            continue;
        }
        if ((g->bind_mode || g->relay) && g->npairs >= MAX_PEERS) {
            close(d);
            char why[96];
            snprintf(why, sizeof why, "%d connections at once: another refused", MAX_PEERS);
            note(g, why, 0);
            continue;
        }
        if (g->bind_mode) {
            /* a peer (anyone who reaches the endpoint) on one side, libzmq's bind on the other */
            int z = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            struct sockaddr_un un = {.sun_family = AF_UNIX};
            snprintf(un.sun_path, sizeof un.sun_path, "%s", g->path);
            if (z < 0 || connect(z, (struct sockaddr *)&un, sizeof un) != 0) {
                if (z >= 0) close(z);
                close(d);
                continue;
            }
            new_pair(g, z, d);
            continue;
        }
        struct ucred cr;
        socklen_t cl = sizeof cr;
        if (!g->relay && (getsockopt(d, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || cr.pid != getpid())) {
            close(d); /* only this process's own libzmq connects here */
            continue;
        }
        pair_t *p = new_pair(g, d, -1);
        if (p) try_up(p);
    }
}

/* Drops dead pairs and guards released by their sockets, retries connects that are due, and
 * returns how long epoll may wait (ms; -1: until something happens). */
static int sweep(void) {
    long long now = now_ms(), next = -1;
    pthread_mutex_lock(&g_mu);
    for (guard_t **gp = &g_guards; *gp;) {
        guard_t *g = *gp;
        for (pair_t **pp = &g->pairs; *pp;) {
            pair_t *p = *pp;
            if (p->dead || g->closing) {
                *pp = p->next;
                close_pair(p);
            } else {
                if (p->up < 0 && p->retry_at && p->retry_at <= now) try_up(p);
                if (p->up < 0 && p->retry_at && !p->dead && (next < 0 || p->retry_at < next)) next = p->retry_at;
                update(p);
                pp = &p->next;
            }
        }
        if (g->closing) {
            *gp = g->next;
            drop_fd(&g->lfd);
            if (g->up_dirfd >= 0) close(g->up_dirfd);
            if (!g->keep_path) unlink(g->path);
            pthread_mutex_destroy(&g->why_mu);
            free(g);
        } else {
            if (!g->in_epoll && g->accept_hold_until > now) {
                if (next < 0 || g->accept_hold_until < next) next = g->accept_hold_until;
            } else if (!g->in_epoll) {
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->lep};
                epoll_ctl(g_epoll, EPOLL_CTL_ADD, g->lfd, &ev);
                g->in_epoll = 1;
            }
            gp = &g->next;
        }
    }
    pthread_mutex_unlock(&g_mu);
    if (next < 0) return -1;
    return next - now > 1000 ? 1000 : (int)(next - now);
}

static void *loop(void *arg) {
    (void)arg;
    struct epoll_event evs[64];
    int timeout = -1;
    for (;;) {
        int n = epoll_wait(g_epoll, evs, 64, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        int swept = 0;
        for (int i = 0; i < n; i++) {
            ep_t *e = evs[i].data.ptr;
            unsigned ev = evs[i].events;
            if (e->kind == EP_WAKE) {
                uint64_t v;
                if (read(g_wake, &v, sizeof v) < 0) { /* nothing to do: the sweep below runs anyway */
                }
                swept = 1;
            } else if (e->kind == EP_LISTEN) {
                guard_t *g = e->owner;
                if (!g->closing) on_accept(g);
            } else {
                pair_t *p = e->owner;
                if (p->dead || p->g->closing) continue;
                if (e->kind == EP_DOWN) on_down(p, ev);
                else on_up(p, ev);
            }
        }
        (void)swept;
        timeout = sweep();
    }
}

static void start(void) {
    /* Each guarded connection takes three descriptors more than a direct one (the listener, both
     * ends); a soft limit of 1024 (common) would cap a notebook server at ~60 sessions. seer polls
     * with poll/epoll only (libmicrohttpd too: MHD_USE_POLL), so the soft limit may rise. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536) {
        rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
        if (want > rl.rlim_cur) {
            rl.rlim_cur = want;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    const char *base = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (!base || !base[0] || base[0] != '/' || stat(base, &st) != 0 || !S_ISDIR(st.st_mode) ||
        strlen(base) > 60)
        base = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/seer-guard-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        g_start_errno = errno;
        g_dir[0] = 0;
        return;
    }
    g_epoll = epoll_create1(EPOLL_CLOEXEC);
    g_wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g_wake_ep};
    if (g_epoll < 0 || g_wake < 0 || epoll_ctl(g_epoll, EPOLL_CTL_ADD, g_wake, &ev) != 0) {
        g_start_errno = errno;
        rmdir(g_dir);
        g_dir[0] = 0;
        return;
    }
    /* the thread must not take signals meant for the main thread (Ctrl-C, SIGCHLD) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&t, &a, loop, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    if (r != 0) {
        g_start_errno = r;
        rmdir(g_dir);
        g_dir[0] = 0;
        return;
    }
    atexit(remove_dir);
}

static void wake(void) {
    uint64_t one = 1;
    if (write(g_wake, &one, sizeof one) < 0) { /* the counter is full: a wake-up is pending anyway */
    }
}

/* Parses "ipc://path" or "tcp://host:port" into g; 0, or -1 with err set. */
static int parse_endpoint(guard_t *g, const char *ep, seer_err_t *err) {
    if (strncmp(ep, "ipc://", 6) == 0) {
        const char *path = ep + 6;
        g->ipc = 1;
        if (path[0] == '@') {
            g->abstract = 1;
            struct sockaddr_un *un = (struct sockaddr_un *)&g->up_addr;
            size_t n = strlen(path + 1);
            if (n + 1 > sizeof un->sun_path)
                return seer_err_set(err, SEER_EINVAL, "net: the abstract socket name of %s is too long", ep);
            un->sun_family = AF_UNIX;
            un->sun_path[0] = 0;
            memcpy(un->sun_path + 1, path + 1, n);
            g->up_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
            return 0;
        }
        if (!path[0] || strlen(path) >= sizeof g->up_path)
            return seer_err_set(err, SEER_EINVAL, "net: connect %s: an empty or too long socket path", ep);
        snprintf(g->up_path, sizeof g->up_path, "%s", path);
        return 0;
    }
    if (strncmp(ep, "tcp://", 6) != 0)
        return seer_err_set(err, SEER_EINVAL, "net: cannot guard %s (ipc:// and tcp:// only)", ep);
    char host[256];
    const char *hp = ep + 6, *colon = strrchr(hp, ':');
    if (!colon || colon == hp || (size_t)(colon - hp) >= sizeof host || strchr(hp, ';'))
        return seer_err_set(err, SEER_EINVAL, "net: connect %s: expected tcp://host:port", ep);
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = 0;
    if (host[0] == '[') { /* [::1] */
        size_t n = strlen(host);
        if (n < 3 || host[n - 1] != ']') return seer_err_set(err, SEER_EINVAL, "net: connect %s: a bad address", ep);
        memmove(host, host + 1, n - 2);
        host[n - 2] = 0;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int r = getaddrinfo(host, colon + 1, &hints, &res);
    if (r != 0 || !res)
        return seer_err_set(err, SEER_EINVAL, "net: connect %s: %s", ep, r ? gai_strerror(r) : "no address");
    memcpy(&g->up_addr, res->ai_addr, res->ai_addrlen);
    g->up_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* A new guard with these limits (0: the defaults), the thread started; NULL with err set. */
static guard_t *new_guard(size_t max_bytes, size_t max_frames, seer_err_t *err) {
    pthread_once(&g_once, start);
    if (!g_dir[0]) {
        seer_err_set(err, SEER_EIO, "net: cannot start the connection guard: %s", strerror(g_start_errno));
        return NULL;
    }
    guard_t *g = calloc(1, sizeof *g);
    if (!g) {
        seer_err_set(err, SEER_ENOMEM, "net: out of memory");
        return NULL;
    }
    g->up_dirfd = -1;
    g->max_bytes = max_bytes ? max_bytes : SEER_NET_MAX_BYTES;
    g->max_frames = max_frames ? max_frames : SEER_NET_MAX_FRAMES;
    return g;
}

/* Hands a guard whose listener is open to the thread. */
static void *add_guard(guard_t *g) {
    pthread_mutex_lock(&g_mu);
    g->next = g_guards;
    g_guards = g;
    pthread_mutex_unlock(&g_mu);
    wake();
    return g;
}

/* The public side of a guarded bind: a listener at the endpoint g names; its actual endpoint
 * (a wildcard port resolved) into pub. */
static int open_root_beneath(const char *path, const char *root, const char **rel, seer_err_t *err);

/* The folder of an ipc socket path beneath root, opened with no link followed below root (each
 * folder O_DIRECTORY|O_NOFOLLOW; the folder itself must be a folder, not a link); *name gets the
 * socket's name in it. -1 with err set. */
static int open_socket_folder_beneath(const char *path, const char *root, const char **name, seer_err_t *err) {
    const char *rel;
    int rootfd = open_root_beneath(path, root, &rel, err);
    if (rootfd < 0) return -1;
    const char *slash = strrchr(rel, '/');
    *name = slash ? slash + 1 : rel;
    if (!slash) return rootfd;
    char dir[4096], why[200] = "";
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - rel), rel);
    int dfd = walk_beneath(rootfd, dir, path, why, sizeof why);
    close(rootfd);
    struct stat st;
    if (dfd < 0 || fstat(dfd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (dfd >= 0) close(dfd);
        return seer_err_set(err, SEER_EINVAL, "net: bind ipc://%.200s: %s", path,
                            why[0] ? why : "its folder is missing, a link or not a folder; not followed");
    }
    return dfd;
}

/* A listening unix socket at path (backlog n). beneath (NULL: none) is a folder whose own path is
 * trusted but whose contents another side can change (a sandbox's run folder): the socket's folder
 * is opened with no link followed and the socket made in it through the descriptor, so a folder
 * swapped for a link makes the host create (or remove) nothing elsewhere; a stale socket or link
 * at the name is removed, anything else there refused. Without beneath, what is at path is
 * removed first, as libzmq's ipc bind does. -1 with err set (`what`: the endpoint, for it). */
static int listen_unix(const char *path, const char *beneath, int backlog, const char *what, seer_err_t *err) {
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    int dfd = -1;
    if (strlen(path) >= sizeof un.sun_path)
        return seer_err_set(err, SEER_EINVAL, "net: bind %s: the path is too long for a unix socket", what);
    if (beneath) {
        const char *name;
        dfd = open_socket_folder_beneath(path, beneath, &name, err);
        if (dfd < 0) return -1;
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (!S_ISSOCK(st.st_mode) && !S_ISLNK(st.st_mode)) {
                close(dfd);
                return seer_err_set(err, SEER_EINVAL, "net: bind %s: something that is not a socket is there", what);
            }
            unlinkat(dfd, name, 0); /* a socket an earlier run left (or a link: removed, not followed) */
        }
        if (snprintf(un.sun_path, sizeof un.sun_path, "/proc/self/fd/%d/%s", dfd, name) >= (int)sizeof un.sun_path) {
            close(dfd);
            return seer_err_set(err, SEER_EINVAL, "net: bind %s: the socket's name is too long for a unix socket", what);
        }
    } else {
        memcpy(un.sun_path, path, strlen(path));
        unlink(path);
    }
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&un, sizeof un) != 0 || listen(l, backlog) != 0) {
        int e = errno;
        if (l >= 0) close(l);
        if (dfd >= 0) close(dfd);
        return seer_err_set(err, SEER_EIO, "net: bind %s: %s", what, strerror(e));
    }
    if (dfd >= 0) close(dfd);
    return l;
}

static int listen_public(guard_t *g, const char *endpoint, const char *beneath, char *pub, size_t pub_cap,
                         seer_err_t *err) {
    if (g->ipc && g->abstract)
        return seer_err_set(err, SEER_EINVAL, "net: bind %s: the guard binds ipc:// paths and tcp:// only", endpoint);
    if (g->ipc) {
        int l = listen_unix(g->up_path, beneath, 128, endpoint, err);
        if (l < 0) return -1;
        snprintf(pub, pub_cap, "%s", endpoint);
        g->lfd = l;
        return 0;
    }
    int l = socket(g->up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0) return seer_err_set(err, SEER_EIO, "net: bind %s: %s", endpoint, strerror(errno));
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (const struct sockaddr *)&g->up_addr, g->up_len) != 0 || listen(l, 128) != 0) {
        int e = errno;
        close(l);
        return seer_err_set(err, SEER_EIO, "net: bind %s: %s", endpoint, strerror(e));
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    char host[INET6_ADDRSTRLEN + 2], port[16];
    if (getsockname(l, (struct sockaddr *)&got, &gl) != 0 ||
        getnameinfo((struct sockaddr *)&got, gl, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        close(l);
        return seer_err_set(err, SEER_EIO, "net: bind %s: cannot read the bound address", endpoint);
    }
    snprintf(pub, pub_cap, got.ss_family == AF_INET6 ? "tcp://[%s]:%s" : "tcp://%s:%s", host, port);
    g->lfd = l;
    return 0;
}

static void *open_guard(const char *endpoint, int bind_mode, const char *beneath, size_t max_bytes, size_t max_frames,
                        char *local, size_t local_cap, char *pub, size_t pub_cap, seer_err_t *err) {
    guard_t *g = new_guard(max_bytes, max_frames, err);
    if (!g) return NULL;
    g->bind_mode = bind_mode;
    if (bind_mode && strncmp(endpoint, "tcp://", 6) == 0 && strstr(endpoint, ":*")) {
        char e2[300]; /* a wildcard port: 0 to the kernel */
        const char *star = strstr(endpoint, ":*");
        if ((size_t)(star - endpoint) + 3 > sizeof e2) {
            free(g);
            seer_err_set(err, SEER_EINVAL, "net: bind %s: too long", endpoint);
            return NULL;
        }
        snprintf(e2, sizeof e2, "%.*s:0", (int)(star - endpoint), endpoint);
        if (parse_endpoint(g, e2, err) != 0) {
            free(g);
            return NULL;
        }
    } else if (parse_endpoint(g, endpoint, err) != 0) {
        free(g);
        return NULL;
    }
    pthread_mutex_init(&g->why_mu, NULL);
    g->lep = (ep_t){EP_LISTEN, g};
    pthread_mutex_lock(&g_mu);
    unsigned long serial = ++g_serial;
    pthread_mutex_unlock(&g_mu);
    if (snprintf(g->path, sizeof g->path, "%s/%lu", g_dir, serial) >= (int)sizeof g->path) {
        seer_err_set(err, SEER_EINVAL, "net: the guard's folder %s is too long", g_dir);
        pthread_mutex_destroy(&g->why_mu);
        free(g);
        return NULL;
    }
    if (bind_mode) {
        if (listen_public(g, endpoint, beneath, pub, pub_cap, err) != 0 ||
            snprintf(local, local_cap, "ipc://%s", g->path) >= (int)local_cap) {
            if (g->lfd > 0) close(g->lfd);
            pthread_mutex_destroy(&g->why_mu);
            free(g);
            return NULL;
        }
        return add_guard(g);
    }
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    snprintf(un.sun_path, sizeof un.sun_path, "%s", g->path);
    g->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (g->lfd < 0 || bind(g->lfd, (struct sockaddr *)&un, sizeof un) != 0 || listen(g->lfd, 16) != 0) {
        seer_err_set(err, SEER_EIO, "net: the connection guard cannot listen at %s: %s", g->path, strerror(errno));
        if (g->lfd >= 0) close(g->lfd);
        unlink(g->path);
        pthread_mutex_destroy(&g->why_mu);
        free(g);
        return NULL;
    }
    if (snprintf(local, local_cap, "ipc://%s", g->path) >= (int)local_cap) {
        seer_err_set(err, SEER_EINVAL, "net: guard path too long");
        close(g->lfd);
        unlink(g->path);
        pthread_mutex_destroy(&g->why_mu);
        free(g);
        return NULL;
    }
    return add_guard(g);
}

void *seer_net_guard_open(const char *endpoint, size_t max_bytes, size_t max_frames, char *local, size_t local_cap,
                          seer_err_t *err) {
    return open_guard(endpoint, 0, NULL, max_bytes, max_frames, local, local_cap, NULL, 0, err);
}

/* Opens root (trusted: followed) for a socket path below it and sets *rel to the part below;
 * refuses "." and ".." parts, and a folder on the way that is a link or not a folder now (one
 * that does not exist yet is looked for again at each connect). -1 with err set. */
static int open_root_beneath(const char *path, const char *root, const char **rel, seer_err_t *err) {
    size_t rn = strlen(root);
    while (rn > 1 && root[rn - 1] == '/') rn--;
    if (root[0] != '/' || strncmp(path, root, rn) != 0 || path[rn] != '/') {
        seer_err_set(err, SEER_EINVAL, "net: ipc://%.200s is not beneath %.200s", path, root);
        return -1;
    }
    *rel = path + rn + 1;
    while (**rel == '/') (*rel)++;
    if (!**rel || strlen(*rel) >= 4096) {
        seer_err_set(err, SEER_EINVAL, "net: ipc://%.200s: no socket name below %.200s", path, root);
        return -1;
    }
    for (const char *q = *rel; *q;) {
        const char *slash = strchr(q, '/');
        size_t n = slash ? (size_t)(slash - q) : strlen(q);
        if ((n == 1 && q[0] == '.') || (n == 2 && q[0] == '.' && q[1] == '.') || n == 0 || n >= 256) {
            seer_err_set(err, SEER_EINVAL, "net: ipc://%.200s: '.', '..' or an empty or too long part in the path", path);
            return -1;
        }
        if (!slash) break;
        q = slash + 1;
    }
    int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        seer_err_set(err, SEER_EIO, "net: cannot open %.200s: %s", root, strerror(errno));
        return -1;
    }
    char why[200] = "";
    int probe = walk_beneath(fd, *rel, path, why, sizeof why);
    if (probe >= 0) close(probe);
    if (why[0]) {
        close(fd);
        seer_err_set(err, SEER_EINVAL, "net: %s", why);
        return -1;
    }
    return fd;
}

void *seer_net_guard_open_beneath(const char *endpoint, const char *root, size_t max_bytes, size_t max_frames,
                                  char *local, size_t local_cap, seer_err_t *err) {
    if (strncmp(endpoint, "ipc://", 6) != 0 || endpoint[6] == '@')
        return open_guard(endpoint, 0, NULL, max_bytes, max_frames, local, local_cap, NULL, 0, err);
    const char *rel;
    int dfd = open_root_beneath(endpoint + 6, root, &rel, err);
    if (dfd < 0) return NULL;
    guard_t *g = open_guard(endpoint, 0, NULL, max_bytes, max_frames, local, local_cap, NULL, 0, err);
    if (!g) {
        close(dfd);
        return NULL;
    }
    /* the thread reads these only when it connects, after libzmq connects to the guard */
    pthread_mutex_lock(&g_mu);
    snprintf(g->up_rel, sizeof g->up_rel, "%s", rel);
    g->up_dirfd = dfd;
    pthread_mutex_unlock(&g_mu);
    return g;
}

void *seer_net_guard_bind(const char *endpoint, size_t max_bytes, size_t max_frames, char *local, size_t local_cap,
                          char *pub, size_t pub_cap, seer_err_t *err) {
    return open_guard(endpoint, 1, NULL, max_bytes, max_frames, local, local_cap, pub, pub_cap, err);
}

void *seer_net_guard_bind_beneath(const char *endpoint, const char *beneath, size_t max_bytes, size_t max_frames,
                                  char *local, size_t local_cap, char *pub, size_t pub_cap, seer_err_t *err) {
    if (beneath && (strncmp(endpoint, "ipc://", 6) != 0 || endpoint[6] == '@')) {
        seer_err_set(err, SEER_EINVAL, "net: bind %.200s beneath %.200s: only an ipc:// path can be bound beneath a folder",
                     endpoint, beneath);
        return NULL;
    }
    return open_guard(endpoint, 1, beneath, max_bytes, max_frames, local, local_cap, pub, pub_cap, err);
}

void *seer_net_guard_relay(const char *listen_path, const char *endpoint, size_t max_bytes, size_t max_frames,
                           seer_err_t *err) {
    return seer_net_guard_relay_beneath(listen_path, NULL, endpoint, NULL, max_bytes, max_frames, err);
}

void *seer_net_guard_relay_beneath(const char *listen_path, const char *listen_beneath, const char *endpoint,
                                   const char *beneath, size_t max_bytes, size_t max_frames, seer_err_t *err) {
    guard_t *g = new_guard(max_bytes, max_frames, err);
    if (!g) return NULL;
    g->relay = 1;
    if (parse_endpoint(g, endpoint, err) != 0) {
        free(g);
        return NULL;
    }
    if (beneath && g->ipc && !g->abstract) {
        const char *rel;
        int dfd = open_root_beneath(endpoint + 6, beneath, &rel, err);
        if (dfd < 0) {
            free(g);
            return NULL;
        }
        snprintf(g->up_rel, sizeof g->up_rel, "%s", rel);
        g->up_dirfd = dfd;
    }
    if (strlen(listen_path) >= sizeof g->path) {
        if (g->up_dirfd >= 0) close(g->up_dirfd);
        free(g);
        seer_err_set(err, SEER_EINVAL, "net: relay: the path %.80s is too long for a unix socket", listen_path);
        return NULL;
    }
    snprintf(g->path, sizeof g->path, "%s", listen_path);
    char what[160];
    snprintf(what, sizeof what, "(relay) ipc://%.120s", listen_path);
    g->lfd = listen_unix(listen_path, listen_beneath, 64, what, err);
    if (g->lfd < 0) {
        if (g->up_dirfd >= 0) close(g->up_dirfd);
        free(g);
        return NULL;
    }
    /* a socket made beneath a folder the other side controls stays there when the relay ends
     * (that folder goes with the sandbox): removing it by its path could follow a link */
    g->keep_path = listen_beneath != NULL;
    pthread_mutex_init(&g->why_mu, NULL);
    g->lep = (ep_t){EP_LISTEN, g};
    return add_guard(g);
}

unsigned long seer_net_guard_cuts(void *guard, char *why, size_t why_cap) {
    guard_t *g = guard;
    unsigned long n = atomic_load(&g->cuts);
    if (why && why_cap) {
        pthread_mutex_lock(&g->why_mu);
        snprintf(why, why_cap, "%s", g->why);
        pthread_mutex_unlock(&g->why_mu);
    }
    return n;
}

long long seer_net_guard_down_ms(void *guard) {
    guard_t *g = guard;
    long long since = atomic_load(&g->down_since);
    return since ? now_ms() - since : 0;
}

void seer_net_guard_close(void *guard) {
    guard_t *g = guard;
    if (!g) return;
    pthread_mutex_lock(&g_mu);
    g->closing = 1;
    pthread_mutex_unlock(&g_mu);
    wake();
}
