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

struct seer_net_key {
    int empty;
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
