/* dlopen of libcurl (see curl_dl.h). */
#include "hub/curl_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

seer_curl_api_t seer_curl_api;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_loaded;
static char g_why[512];

static void load(void) {
    /* SEER_LIBCURL names the library to load instead (a path or a soname): for a libcurl
     * outside the loader's search path, and for the tests of the paths below. */
    const char *forced = getenv("SEER_LIBCURL");
    const char *const defaults[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};
    const char *const *names = defaults;
    size_t n_names = sizeof defaults / sizeof *defaults;
    if (forced && *forced) {
        names = &forced;
        n_names = 1;
    }
    void *h = NULL;
    const char *why = "";
    for (size_t i = 0; i < n_names && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) why = dlerror();
    }
    if (!h) {
        snprintf(g_why, sizeof g_why, "libcurl could not be loaded (%s); install it: apt-get install libcurl4%s", why,
                 forced && *forced ? ", or correct SEER_LIBCURL" : "");
        return;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {
#define S(field, sym) {(void **)&seer_curl_api.field, sym}
        S(easy_init, "curl_easy_init"),         S(easy_setopt, "curl_easy_setopt"),
        S(easy_perform, "curl_easy_perform"),   S(easy_getinfo, "curl_easy_getinfo"),
        S(easy_cleanup, "curl_easy_cleanup"),   S(easy_strerror, "curl_easy_strerror"),
        S(global_init, "curl_global_init"),     S(slist_append, "curl_slist_append"),
        S(slist_free_all, "curl_slist_free_all"), S(multi_init, "curl_multi_init"),
        S(multi_add_handle, "curl_multi_add_handle"), S(multi_remove_handle, "curl_multi_remove_handle"),
        S(multi_perform, "curl_multi_perform"), S(multi_poll, "curl_multi_poll"),
        S(multi_info_read, "curl_multi_info_read"), S(multi_setopt, "curl_multi_setopt"),
        S(multi_cleanup, "curl_multi_cleanup"), S(multi_strerror, "curl_multi_strerror"),
        S(getdate, "curl_getdate"),
#undef S
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(g_why, sizeof g_why,
                     "the libcurl found has no %s (libcurl 7.66 or later is needed); install it: apt-get install libcurl4",
                     syms[i].name);
            return;
        }
    }
    g_loaded = 1;
}

CURLcode seer_curl_global_init(long flags) {
    pthread_once(&g_once, load);
    if (!g_loaded) return CURLE_FAILED_INIT;
    return seer_curl_api.global_init(flags);
}

const char *seer_curl_easy_strerror(CURLcode rc) {
    pthread_once(&g_once, load);
    if (!g_loaded) return g_why;
    return seer_curl_api.easy_strerror(rc);
}

time_t seer_curl_getdate(const char *s, const time_t *now) {
    pthread_once(&g_once, load);
    if (!g_loaded) return -1;
    return seer_curl_api.getdate(s, now);
}
