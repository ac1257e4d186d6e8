/* config.json and generation_config.json into seer_model_config_t. Every field a forward pass
 * depends on is checked here, so the architectures can trust the numbers. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "../json/json.h"
#include "model_private.h"

/* A JSON file of a model folder is kilobytes (a 100k-tensor shard index a few MiB). */
#define CONFIG_MAX_BYTES ((size_t)64 << 20)

char *seer_model_read_text(const char *path, size_t *len, seer_err_t *err) {
    /* The folder is not trusted: no FIFO waited on, no link followed out of it (docs/security.md) */
    int fd = seer_st_open_confined(path, NULL, err);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0) {
        close(fd);
        seer_err_set(err, SEER_EIO, "cannot stat %s: %s", path, strerror(errno));
        return NULL;
    }
    if ((size_t)st.st_size > CONFIG_MAX_BYTES) {
        close(fd);
        seer_err_set(err, SEER_EPARSE, "%s: %lld bytes, larger than the 64 MiB a JSON file of a model folder may take",
                     path, (long long)st.st_size);
        return NULL;
    }
    size_t cap = (size_t)st.st_size, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        seer_err_set(err, SEER_ENOMEM, "out of memory reading %s", path);
        return NULL;
    }
    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            seer_err_set(err, SEER_EIO, "cannot read %s: %s", path, strerror(e));
            return NULL;
        }
        if (r == 0) break; /* shrank while reading: what was there */
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static int cmp_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The first key that appears twice in one object of j, at any depth (NULL: none). cJSON's lookups
 * return the first of two equal keys and Python's json (transformers, peft) keeps the last, so such
 * a file would configure one model in seer and another in the reference. */
static const char *duplicate_key(const cJSON *j) {
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j)) return NULL;
    const cJSON *c;
    if (cJSON_IsObject(j)) {
        size_t n = 0;
        for (c = j->child; c; c = c->next) n++;
        if (n > 1 && n <= 16) {
            for (c = j->child; c; c = c->next)
                for (const cJSON *d = c->next; d; d = d->next)
                    if (strcmp(c->string, d->string) == 0) return c->string;
        } else if (n > 16) {
            const char **keys = malloc(n * sizeof *keys);
            if (keys) {
                size_t i = 0;
                for (c = j->child; c; c = c->next) keys[i++] = c->string;
                qsort(keys, n, sizeof *keys, cmp_key);
                const char *dup = NULL;
                for (i = 1; i < n && !dup; i++)
                    if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
                free(keys);
                if (dup) return dup;
            }
        }
    }
    for (c = j->child; c; c = c->next) {
        const char *d = duplicate_key(c);
        if (d) return d;
    }
    return NULL;
}

cJSON *seer_model_read_json(const char *path, seer_err_t *err) {
    size_t n;
    char *text = seer_model_read_text(path, &n, err);
    if (!text) return NULL;
    size_t bad;
    if (!seer_utf8_validate(text, n, &bad)) {
        seer_err_set(err, SEER_EPARSE, "%s: not valid UTF-8 at byte %zu", path, bad);
        free(text);
        return NULL;
    }
    /* counted before cJSON builds its tree (a value costs it ~80 bytes): the file is the model
     * folder's, which may be hostile */
    size_t nvalues = seer_json_count_values(text, n);
    if (nvalues > SEER_JSON_MAX_VALUES_CONFIG) {
        seer_err_set(err, SEER_EPARSE, "%s: holds %zu JSON values, more than the %zu allowed for a config file", path,
                     nvalues, SEER_JSON_MAX_VALUES_CONFIG);
        free(text);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0;
        seer_err_set(err, SEER_EPARSE, "%s: invalid JSON near byte %zu", path, off);
    } else if (!cJSON_IsObject(j)) {
        seer_err_set(err, SEER_EPARSE, "%s: expected a JSON object at the top level", path);
        cJSON_Delete(j);
        j = NULL;
    } else {
        const char *dup = duplicate_key(j);
        if (dup) {
            seer_err_set(err, SEER_EPARSE, "%s: the key \"%.200s\" appears twice in one object (seer would read the first, "
                         "transformers the last)", path, dup);
            cJSON_Delete(j);
            j = NULL;
        }
    }
    free(text);
    return j;
}

/* A Gemma 3 multimodal config (model_type "gemma3", the text model's fields in "text_config")
 * as the gemma3_text config of its language model: text_config, with the top-level fields it
 * lacks (eos_token_id...) and the Gemma3TextConfig defaults that transformers leaves out of a
 * nested config when they equal the default (google/gemma-3-*-it omit vocab_size, heads...). */
static cJSON *flatten_gemma3(cJSON *j) {
    static const char *const defaults[][2] = {
        {"vocab_size", "262208"},          {"hidden_size", "2304"},       {"intermediate_size", "9216"},
        {"num_hidden_layers", "26"},       {"num_attention_heads", "8"}, {"num_key_value_heads", "4"},
        {"head_dim", "256"},               {"max_position_embeddings", "131072"}, {"rms_norm_eps", "1e-6"},
        {"query_pre_attn_scalar", "256"},  {"sliding_window", "4096"},   {"hidden_activation", "\"gelu_pytorch_tanh\""},
    };
    cJSON *tc = cJSON_DetachItemFromObjectCaseSensitive(j, "text_config");
    cJSON *e;
    cJSON_ArrayForEach(e, j) {
        if (strcmp(e->string, "vision_config") == 0 || strcmp(e->string, "model_type") == 0) continue;
        if (!cJSON_GetObjectItemCaseSensitive(tc, e->string)) cJSON_AddItemToObject(tc, e->string, cJSON_Duplicate(e, 1));
    }
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (!cJSON_GetObjectItemCaseSensitive(tc, defaults[i][0]))
            cJSON_AddItemToObject(tc, defaults[i][0], cJSON_Parse(defaults[i][1]));
    cJSON_DeleteItemFromObjectCaseSensitive(tc, "model_type");
    cJSON_AddStringToObject(tc, "model_type", "gemma3_text");
    /* the vision tower's config stays out of the text model's, but the field check sees it */
    cJSON *vc = cJSON_DetachItemFromObjectCaseSensitive(j, "vision_config");
    if (vc) cJSON_AddItemToObject(tc, "vision_config", vc);
    cJSON_AddItemToObject(tc, "text_config", cJSON_CreateString("(flattened)"));
    cJSON_Delete(j);
    return tc;
}

cJSON *seer_model_read_config(const char *path, int *multimodal, seer_err_t *err) {
    cJSON *j = seer_model_read_json(path, err);
    if (multimodal) *multimodal = 0;
    if (!j) return NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    if (cJSON_IsString(mt) && strcmp(mt->valuestring, "gemma3") == 0) {
        if (!cJSON_IsObject(tc)) {
            seer_err_set(err, SEER_EPARSE, "%s: model_type \"gemma3\" without a \"text_config\" object", path);
            cJSON_Delete(j);
            return NULL;
        }
        if (multimodal) *multimodal = 1;
        return flatten_gemma3(j);
    }
    return j;
}

/* Reads an integer field; required fields fail with a message naming them. */
static int get_int(const cJSON *o, const char *key, int *out, int required, int min, int max, const char *path,
                   seer_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return seer_err_set(err, SEER_EPARSE, "%s: missing required field \"%s\"", path, key);
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < min ||
        v->valuedouble > max)
        return seer_err_set(err, SEER_EPARSE, "%s: \"%s\" must be an integer in [%d, %d]", path, key, min, max);
    *out = (int)v->valuedouble;
    return 0;
}

static int get_float(const cJSON *o, const char *key, float *out, int required, const char *path, seer_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return seer_err_set(err, SEER_EPARSE, "%s: missing required field \"%s\"", path, key);
        return 0;
    }
    /* past FLT_MAX the conversion to float is undefined */
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > FLT_MAX)
        return seer_err_set(err, SEER_EPARSE, "%s: \"%s\" must be a finite number", path, key);
    *out = (float)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, int *out, const char *path, seer_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return seer_err_set(err, SEER_EPARSE, "%s: \"%s\" must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* eos_token_id may be an integer or a list of integers. */
static int get_eos(const cJSON *o, seer_model_config_t *c, const char *path, seer_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "eos_token_id");
    if (!v || cJSON_IsNull(v)) return 0;
    c->num_eos = 0;
    /* token ids: integers from 0 (a float past INT_MAX, or an infinity, is undefined as an int) */
#define EOS_ID_OK(x) (cJSON_IsNumber(x) && (x)->valuedouble >= 0 && (x)->valuedouble <= (1 << 24) && \
                      (x)->valuedouble == floor((x)->valuedouble))
    if (cJSON_IsNumber(v)) {
        if (!EOS_ID_OK(v))
            return seer_err_set(err, SEER_EPARSE, "%s: \"eos_token_id\" must be a token id (an integer in [0, %d]), got %g",
                                path, 1 << 24, v->valuedouble);
        c->eos_token_ids[c->num_eos++] = (int)v->valuedouble;
        return 0;
    }
    if (!cJSON_IsArray(v)) return seer_err_set(err, SEER_EPARSE, "%s: \"eos_token_id\" must be an integer or a list", path);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, v) {
        if (!EOS_ID_OK(e))
            return seer_err_set(err, SEER_EPARSE, "%s: \"eos_token_id\"[%d] must be a token id (an integer in [0, %d])", path,
                                i, 1 << 24);
        if (c->num_eos < SEER_MODEL_MAX_EOS) c->eos_token_ids[c->num_eos++] = (int)e->valuedouble;
        i++;
    }
#undef EOS_ID_OK
    return 0;
}

int seer_model_parse_config(seer_model_config_t *c, const char *dir, seer_err_t *err) {
    char path[4096 + 64];
    if (strlen(dir) > 4096) return seer_err_set(err, SEER_EINVAL, "model path too long");
    snprintf(path, sizeof path, "%s/config.json", dir);
    memset(c, 0, sizeof *c);
    cJSON *j = seer_model_read_config(path, NULL, err);
    if (!j) return err ? err->code : SEER_EPARSE;
    int rc = 0;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (!cJSON_IsString(mt) || strlen(mt->valuestring) >= sizeof c->model_type) {
        rc = seer_err_set(err, SEER_EPARSE, "%s: missing or invalid \"model_type\" (expected e.g. \"llama\")", path);
        goto out;
    }
    strcpy(c->model_type, mt->valuestring);
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    if (cJSON_IsArray(archs) && cJSON_IsString(cJSON_GetArrayItem(archs, 0)))
        snprintf(c->architecture, sizeof c->architecture, "%s", cJSON_GetArrayItem(archs, 0)->valuestring);

    /* GPT-2 style names (n_embd, n_layer, ...) are read as their Llama-style equivalents. */
    static const char *const aliases[][2] = {{"n_embd", "hidden_size"}, {"n_layer", "num_hidden_layers"},
                                             {"n_head", "num_attention_heads"}, {"n_positions", "max_position_embeddings"},
                                             {"n_inner", "intermediate_size"}, {"layer_norm_epsilon", "rms_norm_eps"},
                                             {"layer_norm_eps", "rms_norm_eps"}};
    for (size_t a = 0; a < sizeof aliases / sizeof aliases[0]; a++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, aliases[a][0]);
        if (v && !cJSON_IsNull(v) && !cJSON_GetObjectItemCaseSensitive(j, aliases[a][1]))
            cJSON_AddItemToObject(j, aliases[a][1], cJSON_Duplicate(v, 1));
    }
    if (cJSON_GetObjectItemCaseSensitive(j, "n_embd") && !cJSON_GetObjectItemCaseSensitive(j, "intermediate_size")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "n_embd");
        if (cJSON_IsNumber(e)) cJSON_AddNumberToObject(j, "intermediate_size", 4 * e->valuedouble); /* GPT-2's default */
    }
    c->bos_token_id = -1;
    c->rope_theta = 10000.0f;
    c->rms_norm_eps = 1e-6f;
    c->max_position_embeddings = 2048;
    if ((rc = get_int(j, "vocab_size", &c->vocab_size, 1, 1, 1 << 24, path, err)) < 0 ||
        (rc = get_int(j, "hidden_size", &c->hidden_size, 1, 1, 1 << 20, path, err)) < 0 ||
        (rc = get_int(j, "intermediate_size", &c->intermediate_size, 1, 1, 1 << 22, path, err)) < 0 ||
        (rc = get_int(j, "num_hidden_layers", &c->num_layers, 1, 1, 4096, path, err)) < 0 ||
        (rc = get_int(j, "num_attention_heads", &c->num_heads, 1, 1, 4096, path, err)) < 0)
        goto out;
    c->num_kv_heads = c->num_heads;
    c->head_dim = c->hidden_size / c->num_heads; /* 0 when there are more heads than hidden dims: checked below */
    if ((rc = get_int(j, "num_key_value_heads", &c->num_kv_heads, 0, 1, 4096, path, err)) < 0 ||
        (rc = get_int(j, "head_dim", &c->head_dim, 0, 1, 4096, path, err)) < 0 ||
        (rc = get_int(j, "max_position_embeddings", &c->max_position_embeddings, 0, 1, 1 << 24, path, err)) < 0 ||
        (rc = get_int(j, "bos_token_id", &c->bos_token_id, 0, 0, 1 << 24, path, err)) < 0 ||
        (rc = get_float(j, "rms_norm_eps", &c->rms_norm_eps, 0, path, err)) < 0 ||
        (rc = get_float(j, "rope_theta", &c->rope_theta, 0, path, err)) < 0 ||
        (rc = get_bool(j, "tie_word_embeddings", &c->tie_word_embeddings, path, err)) < 0 ||
        (rc = get_bool(j, "attention_bias", &c->attention_bias, path, err)) < 0 ||
        (rc = get_bool(j, "mlp_bias", &c->mlp_bias, path, err)) < 0 ||
        (rc = get_eos(j, c, path, err)) < 0)
        goto out;
    if (c->head_dim < 1) {
        rc = seer_err_set(err, SEER_EPARSE,
                          "%s: num_attention_heads (%d) is larger than hidden_size (%d), so hidden_size / num_attention_heads "
                          "gives heads of 0 dimensions; a config with such heads must set head_dim",
                          path, c->num_heads, c->hidden_size);
        goto out;
    }
    if (!(c->rms_norm_eps >= 0.f)) {
        rc = seer_err_set(err, SEER_EPARSE, "%s: \"rms_norm_eps\" must be a number >= 0, got %g", path, (double)c->rms_norm_eps);
        goto out;
    }
    if (c->num_heads % c->num_kv_heads != 0) {
        rc = seer_err_set(err, SEER_EPARSE, "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                          path, c->num_heads, c->num_kv_heads);
        goto out;
    }
    if (c->head_dim % 2 != 0) {
        rc = seer_err_set(err, SEER_EPARSE, "%s: head_dim %d is odd; rotary embeddings need an even head_dim", path,
                          c->head_dim);
        goto out;
    }
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(j, "sliding_window");
    if (sw && !cJSON_IsNull(sw)) {
        /* a window in tokens; 0 and null: none (a float past INT_MAX is undefined as an int) */
        if (!cJSON_IsNumber(sw) || sw->valuedouble < 0 || sw->valuedouble > 2147483647.0 ||
            sw->valuedouble != floor(sw->valuedouble)) {
            rc = seer_err_set(err, SEER_EPARSE, "%s: \"sliding_window\" must be a number of tokens (an integer >= 0) or null",
                              path);
            goto out;
        }
        c->sliding_window = (int)sw->valuedouble;
    }

    /* transformers 4 writes "rope_theta" and "rope_scaling"; transformers 5 writes one
     * "rope_parameters" object holding rope_theta and the scaling (or one such object per layer
     * type, which the architectures that have layer types read themselves). */
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, "rope_type")) {
        if ((rc = get_float(rp, "rope_theta", &c->rope_theta, 0, path, err)) < 0) goto out;
        if (!rs || cJSON_IsNull(rs)) rs = rp;
    }
    if (rs && !cJSON_IsNull(rs)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!cJSON_IsString(type)) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
        if (!cJSON_IsString(type)) {
            rc = seer_err_set(err, SEER_EPARSE, "%s: rope_scaling has no \"rope_type\"", path);
            goto out;
        }
        if (strcmp(type->valuestring, "llama3") == 0) {
            c->rope_kind = SEER_ROPE_LLAMA3;
            if ((rc = get_float(rs, "factor", &c->rope_factor, 1, path, err)) < 0 ||
                (rc = get_float(rs, "low_freq_factor", &c->rope_low_freq_factor, 1, path, err)) < 0 ||
                (rc = get_float(rs, "high_freq_factor", &c->rope_high_freq_factor, 1, path, err)) < 0 ||
                (rc = get_int(rs, "original_max_position_embeddings", &c->rope_original_max_position, 1, 1, 1 << 24,
                              path, err)) < 0)
                goto out;
        } else if (strcmp(type->valuestring, "linear") == 0) {
            c->rope_kind = SEER_ROPE_LINEAR;
            if ((rc = get_float(rs, "factor", &c->rope_factor, 1, path, err)) < 0) goto out;
        } else if (strcmp(type->valuestring, "dynamic") == 0) {
            c->rope_kind = SEER_ROPE_DYNAMIC;
            if ((rc = get_float(rs, "factor", &c->rope_factor, 1, path, err)) < 0) goto out;
        } else if (strcmp(type->valuestring, "yarn") == 0) {
            /* transformers' _compute_yarn_parameters, its defaults included */
            c->rope_kind = SEER_ROPE_YARN;
            c->rope_factor = 0.f;
            c->rope_beta_fast = 32.f;
            c->rope_beta_slow = 1.f;
            c->rope_truncate = 1;
            float att = 0.f, mscale = 0.f, mscale_all = 0.f;
            if ((rc = get_int(rs, "original_max_position_embeddings", &c->rope_original_max_position, 1, 1, 1 << 24,
                              path, err)) < 0 ||
                (rc = get_float(rs, "factor", &c->rope_factor, 0, path, err)) < 0 ||
                (rc = get_float(rs, "attention_factor", &att, 0, path, err)) < 0 ||
                (rc = get_float(rs, "mscale", &mscale, 0, path, err)) < 0 ||
                (rc = get_float(rs, "mscale_all_dim", &mscale_all, 0, path, err)) < 0 ||
                (rc = get_float(rs, "beta_fast", &c->rope_beta_fast, 0, path, err)) < 0 ||
                (rc = get_float(rs, "beta_slow", &c->rope_beta_slow, 0, path, err)) < 0 ||
                (rc = get_bool(rs, "truncate", &c->rope_truncate, path, err)) < 0)
                goto out;
            if (c->rope_beta_fast == 0.f) c->rope_beta_fast = 32.f; /* `or 32`, as transformers */
            if (c->rope_beta_slow == 0.f) c->rope_beta_slow = 1.f;
            if (c->rope_factor == 0.f) {
                int mp = c->max_position_embeddings;
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "max_position_embeddings");
                if (cJSON_IsNumber(v)) mp = (int)v->valuedouble;
                c->rope_factor = (float)((double)mp / c->rope_original_max_position);
            }
            double f = c->rope_factor;
#define MSCALE(scale, ms) ((scale) <= 1 ? 1.0 : 0.1 * (ms) * log(scale) + 1.0)
            double af;
            if (att != 0.f) af = att;
            else if (mscale != 0.f && mscale_all != 0.f) af = MSCALE(f, mscale) / MSCALE(f, mscale_all);
            else af = MSCALE(f, 1.0);
#undef MSCALE
            /* it multiplies cos and sin as a float: a ratio past FLT_MAX (a huge mscale) became
             * infinite, as did one over a divisor of 0 (mscale_all_dim = -10 / ln(factor)): NaN logits */
            if (!isfinite(af) || fabs(af) > FLT_MAX) {
                rc = seer_err_set(err, SEER_EPARSE,
                                  "%s: rope_scaling (yarn) gives the attention factor %g (0.1 x mscale x ln(factor) + 1 over "
                                  "the same with mscale_all_dim; mscale %g, mscale_all_dim %g, factor %g); it must be a "
                                  "finite number (a float)",
                                  path, af, (double)mscale, (double)mscale_all, f);
                goto out;
            }
            c->rope_attention_factor = (float)af;
        } else if (strcmp(type->valuestring, "longrope") == 0 || strcmp(type->valuestring, "su") == 0) {
            c->rope_kind = SEER_ROPE_LONGROPE; /* the factors are phi3.c's to read */
            c->rope_factor = 1.f;
        } else if (strcmp(type->valuestring, "default") != 0) {
            rc = seer_err_set(err, SEER_EPARSE,
                              "%s: rope_scaling type \"%s\" is not supported (supported: default, linear, llama3, yarn, dynamic, "
                              "longrope)",
                              path, type->valuestring);
            goto out;
        }
        if (c->rope_kind != SEER_ROPE_DEFAULT && !(c->rope_factor > 0.f)) {
            rc = seer_err_set(err, SEER_EPARSE, "%s: rope scaling \"factor\" must be positive", path);
            goto out;
        }
    }
    if (!(c->rope_theta > 0.f)) {
        rc = seer_err_set(err, SEER_EPARSE, "%s: \"rope_theta\" must be a positive number, got %g", path, (double)c->rope_theta);
        goto out;
    }
out:
    cJSON_Delete(j);
    if (rc < 0) return rc;

    /* generation_config.json may refine the stop tokens; it is optional. */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    seer_err_t gerr;
    cJSON *g = seer_model_read_json(path, &gerr);
    if (g) {
        rc = get_eos(g, c, path, err);
        if (rc == 0) rc = get_int(g, "bos_token_id", &c->bos_token_id, 0, 0, 1 << 24, path, err);
        cJSON_Delete(g);
        if (rc < 0) return rc;
    } else if (gerr.code != SEER_ENOTFOUND) {
        return seer_err_set(err, gerr.code, "%s", gerr.msg);
    }
    return 0;
}
