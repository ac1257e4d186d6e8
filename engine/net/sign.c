/* HMAC-SHA256 message signatures (Jupyter's "hmac-sha256" scheme) and the random bytes behind
 * keys and UUIDs, all from OpenSSL's libcrypto. A key keeps two SHA-256 states that have already
 * absorbed the key's inner and outer pad blocks (RFC 2104); a signature copies them instead of
 * re-deriving the pads. The states are OpenSSL's plain SHA256_CTX: deprecated since 3.0, but in
 * every build that has not compiled the deprecated API out, and copying one is a struct
 * assignment, where an EVP context copy allocates and goes through the provider layer, which
 * made a signature on the small messages RPC sends cost about twice as much (EVP_MAC, before,
 * four times). Builds without the deprecated API use EVP_Digest* contexts. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "net.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#define HMAC_BLOCK 64 /* SHA-256's block size */

#ifndef OPENSSL_NO_DEPRECATED_3_0
#define SHA256_STATES 1
#endif

/* The signatures a key has accepted (the replay guard, as ipykernel's digest history): two
 * generations of open-addressing sets of the MACs' first 16 bytes. When the current one holds
 * SEER_NET_HISTORY / 2 entries it becomes the old one and the old one is forgotten, so at least
 * the last SEER_NET_HISTORY / 2 signatures and at most SEER_NET_HISTORY are remembered, in at
 * most 2 * SEER_NET_HISTORY * 16 bytes. A table grows from 256 slots as it fills, so a key that
 * sees little traffic costs little. Keyed by the MAC computed here, never by the received hex
 * text, so re-sending a message with its signature in upper case is still a replay. */
#define HIST_ENTRY 16
typedef struct {
    unsigned char *slots; /* cap * HIST_ENTRY bytes, all zero = free */
    size_t cap, count;
} hist_set;

typedef struct {
    pthread_mutex_t mu; /* the kernel verifies on several threads with one key */
    hist_set cur, old;
} hist_t;

struct seer_net_key {
    int empty;
    hist_t *hist; /* a pointer, so a const key (shared, only read for signing) can still remember */
#ifdef SHA256_STATES
    SHA256_CTX inner, outer;
#else
    EVP_MD *md;
    EVP_MD_CTX *inner, *outer;
#endif
};

static int ssl_error(seer_err_t *err, const char *what) {
    char buf[256];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return seer_err_set(err, SEER_EIO, "%s: %s", what, e ? buf : "OpenSSL error");
}

/* The state after one pad block (the key xor'ed with x). */
#ifdef SHA256_STATES
static int pad_state(SHA256_CTX *c, const unsigned char block[HMAC_BLOCK], unsigned char x) {
    unsigned char pad[HMAC_BLOCK];
    for (int i = 0; i < HMAC_BLOCK; i++) pad[i] = block[i] ^ x;
    int ok = SHA256_Init(c) && SHA256_Update(c, pad, HMAC_BLOCK);
    OPENSSL_cleanse(pad, sizeof pad);
    return ok;
}
#else
static int pad_state(seer_net_key_t *k, EVP_MD_CTX **c, const unsigned char block[HMAC_BLOCK], unsigned char x) {
    unsigned char pad[HMAC_BLOCK];
    for (int i = 0; i < HMAC_BLOCK; i++) pad[i] = block[i] ^ x;
    int ok = (*c = EVP_MD_CTX_new()) && EVP_DigestInit_ex(*c, k->md, NULL) && EVP_DigestUpdate(*c, pad, HMAC_BLOCK);
    OPENSSL_cleanse(pad, sizeof pad);
    return ok;
}
#endif

int seer_net_key_new(seer_net_key_t **out, const void *key, size_t len, seer_err_t *err) {
    *out = NULL;
    seer_net_key_t *k = calloc(1, sizeof *k);
    if (!k) return seer_err_set(err, SEER_ENOMEM, "out of memory for a signing key");
    k->empty = len == 0;
    if (len > 0) {
        if (!(k->hist = calloc(1, sizeof *k->hist))) {
            free(k);
            return seer_err_set(err, SEER_ENOMEM, "out of memory for a signing key");
        }
        pthread_mutex_init(&k->hist->mu, NULL);
        /* A key longer than a block is replaced by its digest; a shorter one is zero-padded. */
        unsigned char block[HMAC_BLOCK] = {0};
        unsigned int dlen = 0;
        int ok = 1;
        if (len > HMAC_BLOCK) ok = EVP_Digest(key, len, block, &dlen, EVP_sha256(), NULL);
        else memcpy(block, key, len);
#ifdef SHA256_STATES
        ok = ok && pad_state(&k->inner, block, 0x36) && pad_state(&k->outer, block, 0x5c);
#else
        ok = ok && (k->md = EVP_MD_fetch(NULL, "SHA256", NULL)) && pad_state(k, &k->inner, block, 0x36) &&
             pad_state(k, &k->outer, block, 0x5c);
#endif
        OPENSSL_cleanse(block, sizeof block);
        if (!ok) {
            int rc = ssl_error(err, "cannot set up HMAC-SHA256");
            seer_net_key_free(k);
            return rc;
        }
    }
    *out = k;
    return SEER_OK;
}

void seer_net_key_free(seer_net_key_t *k) {
    if (!k) return;
    if (k->hist) {
        pthread_mutex_destroy(&k->hist->mu);
        free(k->hist->cur.slots);
        free(k->hist->old.slots);
        free(k->hist);
    }
#ifndef SHA256_STATES
    EVP_MD_CTX_free(k->inner);
    EVP_MD_CTX_free(k->outer);
    EVP_MD_free(k->md);
#endif
    OPENSSL_cleanse(k, sizeof *k);
    free(k);
}

int seer_net_key_empty(const seer_net_key_t *k) { return !k || k->empty; }

/* HMAC = H(outer pad || H(inner pad || frames)), from the key's prepared states; the key itself
 * is only read, so it can sign on several threads at once. */
static int mac_raw(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, unsigned char out[32],
                   seer_err_t *err) {
    unsigned char inner[32];
#ifdef SHA256_STATES
    SHA256_CTX c = k->inner;
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        if (frames[i].len) ok = SHA256_Update(&c, frames[i].data, frames[i].len);
    ok = ok && SHA256_Final(inner, &c);
    c = k->outer;
    ok = ok && SHA256_Update(&c, inner, 32) && SHA256_Final(out, &c);
    OPENSSL_cleanse(&c, sizeof c);
#else
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int l1 = 0, l2 = 0;
    int ok = c && EVP_MD_CTX_copy_ex(c, k->inner);
    for (int i = 0; i < n && ok; i++)
        if (frames[i].len) ok = EVP_DigestUpdate(c, frames[i].data, frames[i].len);
    ok = ok && EVP_DigestFinal_ex(c, inner, &l1) && l1 == 32;
    ok = ok && EVP_MD_CTX_copy_ex(c, k->outer) && EVP_DigestUpdate(c, inner, 32) && EVP_DigestFinal_ex(c, out, &l2) &&
         l2 == 32;
    EVP_MD_CTX_free(c);
#endif
    OPENSSL_cleanse(inner, sizeof inner);
    return ok ? SEER_OK : ssl_error(err, "HMAC");
}

static void to_hex(const unsigned char *in, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

int seer_net_sign(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, char *hex, seer_err_t *err) {
    hex[0] = '\0';
    if (seer_net_key_empty(k)) return SEER_OK;
    unsigned char mac[32];
    int rc = mac_raw(k, frames, n, mac, err);
    if (rc < 0) return rc;
    to_hex(mac, sizeof mac, hex);
    return SEER_OK;
}

int seer_net_verify(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, const void *sig, size_t sig_len) {
    if (seer_net_key_empty(k)) return 1;
    if (sig_len != SEER_NET_SIG_HEX) return 0;
    char want[SEER_NET_SIG_HEX + 1];
    if (seer_net_sign(k, frames, n, want, NULL) < 0) return 0;
    /* Peers may write hex in upper case; fold it before the constant-time compare. */
    char got[SEER_NET_SIG_HEX];
    const char *s = sig;
    for (size_t i = 0; i < SEER_NET_SIG_HEX; i++) got[i] = (s[i] >= 'A' && s[i] <= 'F') ? (char)(s[i] + 32) : s[i];
    return CRYPTO_memcmp(want, got, SEER_NET_SIG_HEX) == 0;
}

/* ---- the replay guard ------------------------------------------------------------------------ */

static size_t hist_slot(const hist_set *s, const unsigned char *e) {
    uint64_t h;
    memcpy(&h, e, sizeof h); /* a MAC is uniformly random already */
    size_t i = (size_t)h & (s->cap - 1);
    for (;;) {
        const unsigned char *p = s->slots + i * HIST_ENTRY;
        static const unsigned char zero[HIST_ENTRY];
        if (memcmp(p, e, HIST_ENTRY) == 0 || memcmp(p, zero, HIST_ENTRY) == 0) return i;
        i = (i + 1) & (s->cap - 1);
    }
}

static int hist_has(const hist_set *s, const unsigned char *e) {
    if (!s->cap) return 0;
    return memcmp(s->slots + hist_slot(s, e) * HIST_ENTRY, e, HIST_ENTRY) == 0;
}

/* Adds e (known absent); 0, or -1 when out of memory (the entry is then not remembered). */
static int hist_add(hist_set *s, const unsigned char *e) {
    if (2 * (s->count + 1) > s->cap) { /* keep the load at most 1/2 */
        size_t nc = s->cap ? s->cap * 2 : 256;
        unsigned char *ns = calloc(nc, HIST_ENTRY);
        if (!ns) return -1;
        hist_set grown = {ns, nc, 0};
        for (size_t i = 0; i < s->cap; i++) {
            const unsigned char *p = s->slots + i * HIST_ENTRY;
            static const unsigned char zero[HIST_ENTRY];
            if (memcmp(p, zero, HIST_ENTRY) != 0) {
                memcpy(grown.slots + hist_slot(&grown, p) * HIST_ENTRY, p, HIST_ENTRY);
                grown.count++;
            }
        }
        free(s->slots);
        *s = grown;
    }
    memcpy(s->slots + hist_slot(s, e) * HIST_ENTRY, e, HIST_ENTRY);
    s->count++;
    return 0;
}

int seer_net_verify_once(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, const void *sig,
                         size_t sig_len) {
    if (seer_net_key_empty(k)) return 1; /* no key, no signatures to remember (as ipykernel) */
    if (sig_len != SEER_NET_SIG_HEX) return 0;
    unsigned char mac[32];
    if (mac_raw(k, frames, n, mac, NULL) < 0) return 0;
    char want[SEER_NET_SIG_HEX + 1], got[SEER_NET_SIG_HEX];
    to_hex(mac, sizeof mac, want);
    const char *s = sig;
    for (size_t i = 0; i < SEER_NET_SIG_HEX; i++) got[i] = (s[i] >= 'A' && s[i] <= 'F') ? (char)(s[i] + 32) : s[i];
    if (CRYPTO_memcmp(want, got, SEER_NET_SIG_HEX) != 0) return 0;
    hist_t *h = k->hist;
    int rc = 1;
    pthread_mutex_lock(&h->mu);
    if (hist_has(&h->cur, mac) || hist_has(&h->old, mac)) rc = -1;
    else {
        if (h->cur.count >= SEER_NET_HISTORY / 2) {
            free(h->old.slots);
            h->old = h->cur;
            h->cur = (hist_set){0};
        }
        hist_add(&h->cur, mac); /* out of memory: accepted unremembered rather than refused */
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

size_t seer_net_history_bytes(const seer_net_key_t *k) {
    if (!k || !k->hist) return 0;
    pthread_mutex_lock(&k->hist->mu);
    size_t n = (k->hist->cur.cap + k->hist->old.cap) * HIST_ENTRY;
    pthread_mutex_unlock(&k->hist->mu);
    return n;
}

int seer_net_random_hex(char *out, size_t nbytes, seer_err_t *err) {
    unsigned char buf[256];
    if (nbytes > sizeof buf) return seer_err_set(err, SEER_EINVAL, "random_hex: at most %zu bytes", sizeof buf);
    if (RAND_bytes(buf, (int)nbytes) != 1) return ssl_error(err, "RAND_bytes");
    to_hex(buf, nbytes, out);
    OPENSSL_cleanse(buf, sizeof buf);
    return SEER_OK;
}

int seer_net_uuid(char out[SEER_NET_UUID_LEN + 1], seer_err_t *err) {
    unsigned char b[16];
    if (RAND_bytes(b, sizeof b) != 1) return ssl_error(err, "RAND_bytes");
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    char hex[33];
    to_hex(b, sizeof b, hex);
    snprintf(out, SEER_NET_UUID_LEN + 1, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
    return SEER_OK;
}
