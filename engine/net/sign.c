/* HMAC-SHA256 message signatures (Jupyter's "hmac-sha256" scheme) and the random bytes behind
 * keys and UUIDs, all from OpenSSL's libcrypto. A key keeps an initialised EVP_MAC context as a
 * template: each signature duplicates it instead of re-fetching the algorithm and re-deriving the
 * key pads, which is most of the cost of a one-shot HMAC() on small messages. */
#include "net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

struct seer_net_key {
    EVP_MAC *mac;
    EVP_MAC_CTX *tmpl; /* NULL for the empty key */
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
        k->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
        if (!k->mac) {
            free(k);
            return ssl_error(err, "HMAC is not available in OpenSSL");
        }
        k->tmpl = EVP_MAC_CTX_new(k->mac);
        char digest[] = "SHA256";
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
        if (!k->tmpl || !EVP_MAC_init(k->tmpl, key, len, params)) {
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
    EVP_MAC_CTX_free(k->tmpl);
    EVP_MAC_free(k->mac);
    free(k);
}

int seer_net_key_empty(const seer_net_key_t *k) { return !k || !k->tmpl; }

static int mac_raw(const seer_net_key_t *k, const seer_net_frame_t *frames, int n, unsigned char out[32],
                   seer_err_t *err) {
    EVP_MAC_CTX *c = EVP_MAC_CTX_dup(k->tmpl);
    if (!c) return ssl_error(err, "HMAC");
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        if (frames[i].len) ok = EVP_MAC_update(c, frames[i].data, frames[i].len);
    size_t outl = 0;
    if (ok) ok = EVP_MAC_final(c, out, &outl, 32) && outl == 32;
    EVP_MAC_CTX_free(c);
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
