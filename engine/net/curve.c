/* CURVE (CurveZMQ: Curve25519 key agreement, authenticated encryption of every frame) for the
 * sockets of seer.core.net, and the one ZAP handler of the process. A CURVE server socket set up
 * here accepts exactly one client public key (the one generated for its sandbox): every other
 * key, and every client without CURVE (the NULL mechanism), is refused during the handshake, so
 * nothing listens unauthenticated. libzmq needs to be built with libsodium (zmq_has("curve"));
 * without it every call here fails with a message that says so. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <zmq.h>

#include "net.h"

#define ZAP_SLOTS 256

typedef struct {
    int used;
    char domain[32];
    unsigned char client[32]; /* the one allowed client public key (binary) */
    unsigned long refused;
} zap_slot_t;

static pthread_mutex_t g_zap_mu = PTHREAD_MUTEX_INITIALIZER;
static zap_slot_t g_zap[ZAP_SLOTS];
static unsigned long g_zap_seq;
static int g_zap_state; /* 0 not started, 1 running, -1 failed */
static char g_zap_err[160];
static pthread_cond_t g_zap_cv = PTHREAD_COND_INITIALIZER;

int seer_net_has_curve(void) { return zmq_has("curve") ? 1 : 0; }

static int no_curve(seer_err_t *err) {
    return seer_err_set(err, SEER_EUNSUPPORTED,
                        "this libzmq was built without CURVE (zmq_has(\"curve\") is false): install a libzmq built "
                        "with libsodium (Debian's libzmq5 is)");
}

int seer_net_curve_keypair(char pub[41], char sec[41], seer_err_t *err) {
    if (!seer_net_has_curve()) return no_curve(err);
    if (zmq_curve_keypair(pub, sec) != 0)
        return seer_err_set(err, SEER_EIO, "zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
    return SEER_OK;
}

int seer_net_curve_public(char pub[41], const char *sec, seer_err_t *err) {
    if (!seer_net_has_curve()) return no_curve(err);
    if (strlen(sec) != 40 || zmq_curve_public(pub, sec) != 0)
        return seer_err_set(err, SEER_EINVAL, "not a CURVE secret key (40 Z85 characters)");
    return SEER_OK;
}

static int send_str(void *s, const char *v, size_t n, int more) {
    return zmq_send(s, v, n, more ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
}

/* The ZAP handler (RFC 27): one REP socket on inproc://zeromq.zap.01 in seer's context. */
static void *zap_main(void *arg) {
    (void)arg;
    seer_err_t err;
    void *ctx = seer_net_context(&err);
    void *rep = ctx ? zmq_socket(ctx, ZMQ_REP) : NULL;
    int zero = 0;
    if (rep) zmq_setsockopt(rep, ZMQ_LINGER, &zero, sizeof zero);
    pthread_mutex_lock(&g_zap_mu);
    if (!rep || zmq_bind(rep, "inproc://zeromq.zap.01") != 0) {
        snprintf(g_zap_err, sizeof g_zap_err, "cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
        g_zap_state = -1;
        if (rep) zmq_close(rep);
        pthread_cond_broadcast(&g_zap_cv);
        pthread_mutex_unlock(&g_zap_mu);
        return NULL;
    }
    g_zap_state = 1;
    pthread_cond_broadcast(&g_zap_cv);
    pthread_mutex_unlock(&g_zap_mu);
    for (;;) {
        /* version, request id, domain, address, identity, mechanism, credentials... */
        char part[8][256];
        size_t len[8];
        int n = 0, more = 1, bad = 0;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, rep, 0) < 0) {
                zmq_msg_close(&m);
                if (zmq_errno() == EINTR) continue;
                zmq_close(rep); /* ETERM: the context is ending */
                return NULL;
            }
            more = zmq_msg_more(&m);
            if (n < 8) {
                size_t l = zmq_msg_size(&m);
                if (l > sizeof part[0]) { l = 0; bad = 1; }
                memcpy(part[n], zmq_msg_data(&m), l);
                len[n] = l;
            }
            n++;
            zmq_msg_close(&m);
        }
        int ok = 0;
        if (!bad && n >= 7 && len[5] == 5 && memcmp(part[5], "CURVE", 5) == 0 && len[6] == 32) {
            pthread_mutex_lock(&g_zap_mu);
            for (int i = 0; i < ZAP_SLOTS; i++) {
                zap_slot_t *z = &g_zap[i];
                if (z->used && strlen(z->domain) == len[2] && memcmp(z->domain, part[2], len[2]) == 0) {
                    if (memcmp(z->client, part[6], 32) == 0) ok = 1;
                    else z->refused++;
                }
            }
            pthread_mutex_unlock(&g_zap_mu);
        }
        /* version, request id (echoed), status code, status text, user id, metadata */
        send_str(rep, "1.0", 3, 1);
        send_str(rep, n > 1 ? part[1] : "", n > 1 ? len[1] : 0, 1);
        send_str(rep, ok ? "200" : "400", 3, 1);
        send_str(rep, ok ? "OK" : "refused", ok ? 2 : 7, 1);
        send_str(rep, ok ? "sandbox-client" : "", ok ? 14 : 0, 1);
        send_str(rep, "", 0, 0);
    }
}

static int zap_start(seer_err_t *err) {
    static pthread_t th;
    pthread_mutex_lock(&g_zap_mu);
    if (g_zap_state == 0) {
        g_zap_state = 2; /* starting */
        if (pthread_create(&th, NULL, zap_main, NULL) != 0) {
            g_zap_state = -1;
            snprintf(g_zap_err, sizeof g_zap_err, "cannot start the ZAP handler thread");
        } else {
            pthread_detach(th);
        }
    }
    while (g_zap_state == 2) pthread_cond_wait(&g_zap_cv, &g_zap_mu);
    int st = g_zap_state;
    pthread_mutex_unlock(&g_zap_mu);
    if (st < 0) return seer_err_set(err, SEER_EIO, "%s", g_zap_err);
    return SEER_OK;
}

int seer_net_curve_server(void *sock, const char *secret, const char *client_public, int *slot, seer_err_t *err) {
    if (!seer_net_has_curve()) return no_curve(err);
    unsigned char client[32], sec[32];
    if (strlen(secret) != 40 || !zmq_z85_decode(sec, secret))
        return seer_err_set(err, SEER_EINVAL, "the server secret key is not a CURVE key (40 Z85 characters)");
    if (strlen(client_public) != 40 || !zmq_z85_decode(client, client_public))
        return seer_err_set(err, SEER_EINVAL, "the allowed client key is not a CURVE public key (40 Z85 characters)");
    int rc = zap_start(err);
    if (rc < 0) return rc;
    pthread_mutex_lock(&g_zap_mu);
    int i;
    for (i = 0; i < ZAP_SLOTS && g_zap[i].used; i++) {
    }
    if (i == ZAP_SLOTS) {
        pthread_mutex_unlock(&g_zap_mu);
        return seer_err_set(err, SEER_ENOMEM, "too many CURVE server sockets in this process (%d)", ZAP_SLOTS);
    }
    zap_slot_t *z = &g_zap[i];
    memset(z, 0, sizeof *z);
    z->used = 1;
    snprintf(z->domain, sizeof z->domain, "seer-curve-%lu", ++g_zap_seq);
    memcpy(z->client, client, 32);
    pthread_mutex_unlock(&g_zap_mu);
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, z->domain, strlen(z->domain)) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 32) != 0) {
        seer_net_curve_release(i);
        return seer_err_set(err, SEER_EIO, "setting CURVE server options: %s", zmq_strerror(zmq_errno()));
    }
#ifdef ZMQ_ZAP_ENFORCE_DOMAIN
    zmq_setsockopt(sock, ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one);
#endif
    memset(sec, 0, sizeof sec);
    *slot = i;
    return SEER_OK;
}

unsigned long seer_net_curve_refused(int slot) {
    if (slot < 0 || slot >= ZAP_SLOTS) return 0;
    pthread_mutex_lock(&g_zap_mu);
    unsigned long n = g_zap[slot].refused;
    pthread_mutex_unlock(&g_zap_mu);
    return n;
}

void seer_net_curve_release(int slot) {
    if (slot < 0 || slot >= ZAP_SLOTS) return;
    pthread_mutex_lock(&g_zap_mu);
    memset(&g_zap[slot], 0, sizeof g_zap[slot]);
    pthread_mutex_unlock(&g_zap_mu);
}

int seer_net_curve_client(void *sock, const char *server_public, const char *client_public, const char *client_secret,
                          seer_err_t *err) {
    if (!seer_net_has_curve()) return no_curve(err);
    unsigned char sp[32], cp[32], cs[32];
    if (strlen(server_public) != 40 || !zmq_z85_decode(sp, server_public))
        return seer_err_set(err, SEER_EINVAL, "the server key is not a CURVE public key (40 Z85 characters)");
    if (strlen(client_public) != 40 || !zmq_z85_decode(cp, client_public) || strlen(client_secret) != 40 ||
        !zmq_z85_decode(cs, client_secret))
        return seer_err_set(err, SEER_EINVAL, "the client keys are not a CURVE key pair (40 Z85 characters each)");
    int rc = SEER_OK;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, sp, 32) != 0 || zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, cp, 32) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, cs, 32) != 0)
        rc = seer_err_set(err, SEER_EIO, "setting CURVE client options: %s", zmq_strerror(zmq_errno()));
    memset(cs, 0, sizeof cs);
    return rc;
}
