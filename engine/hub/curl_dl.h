/* libcurl loaded with dlopen on first use instead of linked: libcurl and the ~40 libraries it
 * pulls in (TLS, HTTP/2, SSH, LDAP, Kerberos, IDN...) cost every seer process ~half of its
 * start-up in the dynamic loader, while only downloads, MCP over HTTP and the agent harness use
 * it. Files that use curl include this header instead of <curl/curl.h>: the curl_* names become
 * the loaded entry points. curl_global_init loads the library; when it cannot, it returns
 * CURLE_FAILED_INIT and curl_easy_strerror explains what is missing and how to install it. */
#ifndef SEER_CURL_DL_H
#define SEER_CURL_DL_H

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

typedef struct seer_curl_api {
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_perform)(CURL *);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLcode (*global_init)(long);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_perform)(CURLM *, int *);
    CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd[], unsigned int, int, int *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    CURLMcode (*multi_cleanup)(CURLM *);
    const char *(*multi_strerror)(CURLMcode);
    time_t (*getdate)(const char *, const time_t *);
} seer_curl_api_t;

extern seer_curl_api_t seer_curl_api;

/* Loads libcurl.so.4 (once, thread-safe), then runs its curl_global_init. */
CURLcode seer_curl_global_init(long flags);
/* curl_easy_strerror, or why libcurl could not be loaded. */
const char *seer_curl_easy_strerror(CURLcode rc);
/* curl_getdate, usable before curl_global_init (loads libcurl); -1 when it cannot be loaded. */
time_t seer_curl_getdate(const char *s, const time_t *now);

#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init(flags) seer_curl_global_init(flags)
#define curl_easy_strerror(rc) seer_curl_easy_strerror(rc)
#define curl_easy_init seer_curl_api.easy_init
#define curl_easy_setopt seer_curl_api.easy_setopt
#define curl_easy_perform seer_curl_api.easy_perform
#define curl_easy_getinfo seer_curl_api.easy_getinfo
#define curl_easy_cleanup seer_curl_api.easy_cleanup
#define curl_slist_append seer_curl_api.slist_append
#define curl_slist_free_all seer_curl_api.slist_free_all
#define curl_multi_init seer_curl_api.multi_init
#define curl_multi_add_handle seer_curl_api.multi_add_handle
#define curl_multi_remove_handle seer_curl_api.multi_remove_handle
#define curl_multi_perform seer_curl_api.multi_perform
#define curl_multi_poll seer_curl_api.multi_poll
#define curl_multi_info_read seer_curl_api.multi_info_read
#define curl_multi_setopt seer_curl_api.multi_setopt
#define curl_multi_cleanup seer_curl_api.multi_cleanup
#define curl_multi_strerror seer_curl_api.multi_strerror
#define curl_getdate(s, now) seer_curl_getdate(s, now)

#endif
