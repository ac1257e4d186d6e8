/* HMAC-SHA256 message signatures (Jupyter's "hmac-sha256" scheme) and the random bytes behind
 * keys and UUIDs, all from OpenSSL's libcrypto. A key keeps two SHA-256 contexts that have
 * already absorbed the key's inner and outer pad blocks (RFC 2104); a signature copies them
 * instead of re-deriving the pads, and goes through EVP_Digest* rather than EVP_MAC, whose
 * per-call set-up (context duplication, provider look-ups) cost three times the hashing itself
 * on the small messages RPC sends. */
#include "net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#define HMAC_BLOCK 64 /* SHA-256's block size */

struct seer_net_key {
    EVP_MD *md;
    EVP_MD_CTX *inner, *outer; /* NULL for the empty key */
};

static int ssl_error(seer_err_t *err, const char *what) {
    char buf[256];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return seer_err_set(err, SEER_EIO, "%s: %s", what, e ? buf : "OpenSSL error");
}

int seer_net_key_new(seer_net_key_t **out, const void *key, size_t len, seer_err_t *err) {
    *out = NULL;
    seer_net_key_t *k = calloc(1, sizeof *k);
    if (!k) return seer_err_set(err, SEER_ENOMEM, "out of memory for a signing key");
    if (len > 0) {
        unsigned char block[HMAC_BLOCK] = {0}, pad[HMAC_BLOCK];
        unsigned int dlen = 0;
        int ok = (k->md = EVP_MD_fetch(NULL, "SHA256", NULL)) != NULL;
        /* A key longer than a block is replaced by its digest; a shorter one is zero-padded. */
        if (ok && len > HMAC_BLOCK) ok = EVP_Digest(key, len, block, &dlen, k->md, NULL);
        else if (ok) memcpy(block, key, len);
        ok = ok && (k->inner = EVP_MD_CTX_new()) && (k->outer = EVP_MD_CTX_new());
        for (int i = 0; i < HMAC_BLOCK; i++) pad[i] = block[i] ^ 0x36;
        ok = ok && EVP_DigestInit_ex(k->inner, k->md, NULL) && EVP_DigestUpdate(k->inner, pad, HMAC_BLOCK);
        for (int i = 0; i < HMAC_BLOCK; i++) pad[i] = block[i] ^ 0x5c;
        ok = ok && EVP_DigestInit_ex(k->outer, k->md, NULL) && EVP_DigestUpdate(k->outer, pad, HMAC_BLOCK);
        OPENSSL_cleanse(block, sizeof block);
        OPENSSL_cleanse(pad, sizeof pad);
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
    EVP_MD_CTX_free(k->inner);
    EVP_MD_CTX_free(k->outer);
    EVP_MD_free(k->md);
    free(k);
}

int seer_net_key_empty(const seer_net_key_t *k) { return !k || !k->inner; }

/* HMAC = H(outer pad || H(inner pad || frames)), from the key's prepared contexts. A fresh
 * context per call keeps a key usable from several threads at once. */
static int mac_raw(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, unsigned char out[32],
                   seer_err_t *err) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char inner[32];
    unsigned int l1 = 0, l2 = 0;
    int ok = c && EVP_MD_CTX_copy_ex(c, k->inner);
    for (int i = 0; i < n && ok; i++)
        if (frames[i].len) ok = EVP_DigestUpdate(c, frames[i].data, frames[i].len);
    ok = ok && EVP_DigestFinal_ex(c, inner, &l1) && l1 == 32;
    ok = ok && EVP_MD_CTX_copy_ex(c, k->outer) && EVP_DigestUpdate(c, inner, 32) && EVP_DigestFinal_ex(c, out, &l2) &&
         l2 == 32;
    EVP_MD_CTX_free(c);
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
