/* seer.core.model: the Lua face of the model runtime. A model is a userdata; forward returns a
 * logits tensor; a generator owns a KV cache, a seeded RNG and the token history and yields one
 * token per call, so lua/seer/model.lua can offer iterators, callbacks and stop strings
 * without a Lua call inside the forward pass. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "../hooks/lua_hooks.h"
#include "host/host.h"
#include "../tensor/tensor.h"
#include "model_private.h"
#include "cuda/cudrv.h"

#define MODEL_MT "seer.model"
#define GEN_MT "seer.generator"
#define HOOKSETS_MT "seer.hooksets"
#define FWDKEEP_MT "seer.forward_keep"

typedef struct {
    seer_model_t *m;
} model_ud;

typedef struct {
    seer_model_t *m;
    int model_ref; /* keeps the model alive while the generator lives */
    seer_kv_cache_t *cache;
    int32_t *hist;
    int nhist, cap, nprompt;
    int prefilled, done;
    int max_new, min_new, ngen;
    int stop_ids[SEER_MODEL_MAX_EOS + 32];
    int nstop;
    float *logits;
    seer_hookset_t *hooks; /* the hooks active when the generator was made (NULL: none) */
    int batch;             /* 0-based index in a batch, for hook functions (hook.batch) */
    seer_sampler_opts_t o;
    seer_rng_t rng;
    /* share_prompt: in step_batch, a generator with the same prompt and hooks (and this flag)
     * may take this one's prompt cache and logits instead of computing them (prompt_donor) */
    int share;
    float *plogits;  /* the prompt's logits as the prefill left them (share only; NULL: none) */
    uint64_t pepoch; /* seer_model_state_epoch when they were computed */
    int took;        /* its prompt was taken from another generator (take_prompt) */
    int took_rows;   /* how many first positions of its prompt were taken (all: took; else take_prefix) */
    uint64_t kepoch; /* seer_model_state_epoch when its prompt's KV rows were computed or taken */
    int donor_at;    /* 1-based index of the generator it took from in the list of its first step
                      * (next's donors, or step_batch's generators); 0: none */
    int took_blocks; /* how many first blocks of its prompt were taken (take_blocks); 0: none */
    /* The residual entering block bblock of its prompt ([nprompt][hidden_size]; NULL, 0: none),
     * computed or taken with its KV rows (kepoch): what a sequence with its prompt tokens and its
     * hooks before that block starts from (block_donor). Kept while the generator lives, also in
     * the prompt cache (keep_prompt). */
    float *bres;
    int bblock;
} gen_ud;

/* Prefills that step_batch served by copying another generator's prompt (core.shared_prefills). */
static uint64_t g_shared_prefills, g_shared_prefix_rows, g_shared_block_rows;

/* Raises err as a Lua error. For an interrupt the pending interrupt hook is cleared first: it
 * would otherwise fire inside the error handler ("error in error handling") and the message and
 * traceback would be lost; this error already says "interrupted". */
static int raise_err(lua_State *L, const seer_err_t *err) {
    if (err->code == SEER_EINTR) return seer_host_interrupt_raise(L);
    return luaL_error(L, "%s", err->msg);
}

static seer_model_t *check_model(lua_State *L, int idx) {
    model_ud *u = luaL_checkudata(L, idx, MODEL_MT);
    if (!u->m) luaL_error(L, "the model was freed");
    return u->m;
}

seer_model_t *seer_model_lua_check(lua_State *L, int idx) { return check_model(L, idx); }

static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int threads = (int)seer_lua_optint(L, 2, 0, 0, 4096, "load: threads");
    /* every argument read before the userdata goes on the stack: called with fewer than six,
     * index 3 and up would be the userdata itself (hidden = true, a device that is no string) */
    const char *wts = luaL_optstring(L, 6, "auto");
    int weights = strcmp(wts, "memory") == 0 ? SEER_WEIGHTS_MEMORY : strcmp(wts, "mapped") == 0 ? SEER_WEIGHTS_MAPPED : SEER_WEIGHTS_AUTO;
    if (weights == SEER_WEIGHTS_AUTO && strcmp(wts, "auto") != 0)
        return luaL_error(L, "weights '%s' is not known; use \"memory\" or \"mapped\" (or leave it out)", wts);
    seer_model_opts_t o = {.threads = threads, .hidden = lua_toboolean(L, 3), .device = luaL_optstring(L, 4, "cpu"),
                           .progress = -1, .fast_bf16 = lua_toboolean(L, 5), .weights = weights};
    model_ud *u = lua_newuserdata(L, sizeof *u);
    u->m = NULL;
    luaL_getmetatable(L, MODEL_MT);
    lua_setmetatable(L, -2);
    seer_err_t err;
    if (seer_model_load(&u->m, path, &o, &err) < 0) return luaL_error(L, "%s", err.msg);
    return 1;
}

/* c:device() -> "cpu" | "cuda:N" */
static int l_device(lua_State *L) {
    char buf[32];
    lua_pushstring(L, seer_model_device(check_model(L, 1), buf, sizeof buf));
    return 1;
}

static int l_model_gc(lua_State *L) {
    model_ud *u = luaL_checkudata(L, 1, MODEL_MT);
    seer_model_free(u->m);
    u->m = NULL;
    return 0;
}

#define SET_INT(name, v)              \
    do {                              \
        lua_pushinteger(L, (v));      \
        lua_setfield(L, -2, (name));  \
    } while (0)
#define SET_NUM(name, v)              \
    do {                              \
        lua_pushnumber(L, (v));       \
        lua_setfield(L, -2, (name));  \
    } while (0)

/* devices() -> list of {index, name, compute_capability, memory_bytes, free_bytes, sm_count,
 * bandwidth_gbs}, or an empty list and the reason there is no GPU. */
static int l_devices(lua_State *L) {
    char why[512];
    int n = seer_cuda_device_count(why, sizeof why);
    lua_newtable(L);
    for (int i = 0; i < n; i++) {
        seer_cuda_devinfo_t d;
        seer_err_t err;
        if (seer_cuda_device_info(i, &d, &err) < 0) return luaL_error(L, "%s", err.msg);
        lua_newtable(L);
        SET_INT("index", i);
        lua_pushstring(L, d.name);
        lua_setfield(L, -2, "name");
        lua_pushfstring(L, "%d.%d", d.cc_major, d.cc_minor);
        lua_setfield(L, -2, "compute_capability");
        SET_NUM("memory_bytes", (lua_Number)d.total_bytes);
        SET_NUM("free_bytes", (lua_Number)d.free_bytes);
        SET_INT("sm_count", d.sm_count);
        /* DDR: two transfers per clock; kHz * bytes per transfer. */
        SET_NUM("bandwidth_gbs", 2.0 * d.mem_clock_khz * 1e3 * (d.bus_width_bits / 8) / 1e9);
        lua_rawseti(L, -2, i + 1);
    }
    if (n > 0) return 1;
    lua_pushstring(L, why);
    return 2;
}

/* The config with transformers' field names, so recipes read model.config.num_hidden_layers. */
static int l_config(lua_State *L) {
    seer_model_t *m = check_model(L, 1);
    const seer_model_config_t *c = seer_model_config(m);
    lua_newtable(L);
    lua_pushstring(L, c->model_type);
    lua_setfield(L, -2, "model_type");
    lua_pushstring(L, c->architecture);
    lua_setfield(L, -2, "architecture");
    SET_INT("vocab_size", c->vocab_size);
    SET_INT("hidden_size", c->hidden_size);
    SET_INT("intermediate_size", c->intermediate_size);
    SET_INT("num_hidden_layers", c->num_layers);
    SET_INT("num_attention_heads", c->num_heads);
    SET_INT("num_key_value_heads", c->num_kv_heads);
    SET_INT("head_dim", c->head_dim);
    SET_INT("max_position_embeddings", c->max_position_embeddings);
    SET_NUM("rms_norm_eps", c->rms_norm_eps);
    SET_NUM("rope_theta", c->rope_theta);
    lua_pushboolean(L, c->tie_word_embeddings);
    lua_setfield(L, -2, "tie_word_embeddings");
    if (c->sliding_window > 0) SET_INT("sliding_window", c->sliding_window);
    if (c->bos_token_id >= 0) SET_INT("bos_token_id", c->bos_token_id);
    lua_createtable(L, c->num_eos, 0);
    for (int i = 0; i < c->num_eos; i++) {
        lua_pushinteger(L, c->eos_token_ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "eos_token_ids");
    lua_pushstring(L, seer_dtype_name(c->weight_dtype));
    lua_setfield(L, -2, "dtype");
    SET_NUM("num_parameters", (double)seer_model_param_count(m));
    SET_NUM("weight_bytes", (double)seer_model_weight_bytes(m));
    SET_NUM("decode_bytes", (double)seer_model_decode_bytes(m));
    SET_NUM("decode_parameters", (double)seer_model_decode_params(m));
    lua_pushstring(L, seer_model_weights_in_memory(m) ? "memory" : "mapped");
    lua_setfield(L, -2, "weights");
    SET_INT("amx_packed_matrices", seer_model_amx_packed(m));
    lua_pushstring(L, seer_model_kv_dtype(m));
    lua_setfield(L, -2, "kv_cache_dtype");
    int gmin = seer_model_gemm_min_tokens(m);
    if (gmin >= SEER_GEMM_NEVER) SET_NUM("gemm_min_tokens", HUGE_VAL); /* math.huge: every count shares the pass */
    else if (gmin > 0) SET_INT("gemm_min_tokens", gmin);
    lua_pushstring(L, seer_model_dir(m));
    lua_setfield(L, -2, "path");
    return 1;
}

/* A Lua array of token ids (0-based ids) into an int32 array owned by a userdata pushed on the
 * stack (collected with it, so a later Lua error cannot leak it). */
static int32_t *read_ids(lua_State *L, int idx, int *n) {
    luaL_checktype(L, idx, LUA_TTABLE);
    int len = (int)lua_objlen(L, idx);
    int32_t *ids = lua_newuserdata(L, sizeof(int32_t) * (size_t)(len > 0 ? len : 1));
    for (int i = 0; i < len; i++) {
        lua_rawgeti(L, idx, i + 1);
        if (lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "token ids must be integers; element %d is a %s", i + 1, luaL_typename(L, -1));
        char what[64];
        snprintf(what, sizeof what, "token ids: element %d", i + 1);
        ids[i] = (int32_t)seer_lua_int(L, -1, INT32_MIN, INT32_MAX, what);
        lua_pop(L, 1);
    }
    *n = len;
    return ids;
}

/* The stop_at_layer argument at idx: nil -> 0 (the whole pass), L (0 .. num_layers) -> L + 1
 * (seer_fwd_hooks_t.stop); a model on a GPU runs the whole pass (0), its logits computed. */
static int stop_arg(lua_State *L, int idx, seer_model_t *m, const char *what) {
    if (lua_isnoneornil(L, idx)) return 0;
    int stop = (int)seer_lua_optint(L, idx, 0, 0, seer_model_config(m)->num_layers, what) + 1;
    char dev[32];
    return strcmp(seer_model_device(m, dev, sizeof dev), "cpu") == 0 ? stop : 0;
}

/* The start_at_layer argument at idx: nil -> 0 (from the embeddings), L (0 .. num_layers) -> L + 1
 * (seer_fwd_hooks_t.from). */
static int from_arg(lua_State *L, int idx, seer_model_t *m) {
    if (lua_isnoneornil(L, idx)) return 0;
    return (int)seer_lua_optint(L, idx, 0, 0, seer_model_config(m)->num_layers, "forward: start_at_layer") + 1;
}

/* The residual a start_at_layer pass begins with, at idx: a contiguous f32 tensor [n, hidden_size]
 * (the Lua layer converts what it is given); seq names the sequence in the error. */
static const float *resid_arg(lua_State *L, int idx, seer_model_t *m, int n, int seq) {
    seer_tensor_t *t = seer_tensor_test(L, idx);
    int D = seer_model_config(m)->hidden_size;
    if (!t || t->dtype != SEER_F32 || t->ndim != 2 || t->shape[0] != n || t->shape[1] != D || !seer_tensor_is_contiguous(t))
        luaL_error(L, "forward: start_at_layer needs sequence %d's residual as a contiguous f32 tensor [%d, %d]", seq, n, D);
    return seer_tensor_data(t);
}

/* What a forward call from the embeddings keeps for later calls on its tokens (a model's prompt
 * cache holds it, lua/seer/model.lua): the residual entering the first block its hooks act on
 * or record in, where nothing acts before (no hook at the embeddings or in an earlier block).
 * A later call on the same tokens, under the same model state, with no hook before that block
 * either has that residual there, so it runs from there (l_forward's donors). Holds no hooks:
 * below its block there were none to compare. */
typedef struct {
    const seer_model_t *m; /* compared, never followed */
    int n, block;
    int32_t *ids;
    float *res; /* [n][hidden_size] */
    size_t bytes;
    uint64_t epoch;
} fwdkeep_ud;

static int l_fwdkeep_gc(lua_State *L) {
    fwdkeep_ud *k = luaL_checkudata(L, 1, FWDKEEP_MT);
    free(k->ids);
    free(k->res);
    k->ids = NULL, k->res = NULL;
    return 0;
}

/* entry:info() -> bytes held, its block, whether it was computed under the model state of now */
static int l_fwdkeep_info(lua_State *L) {
    fwdkeep_ud *k = luaL_checkudata(L, 1, FWDKEEP_MT);
    lua_pushnumber(L, (lua_Number)k->bytes);
    lua_pushinteger(L, k->block);
    lua_pushboolean(L, k->m && k->epoch == seer_model_state_epoch(k->m));
    return 3;
}

/* The first block a hook set acts on or records in, where a pass could start from a kept
 * residual: 0 when something acts at the embeddings or in block 0, or nothing acts inside a block
 * (hooks only at the final norm, or none). */
static int first_hooked_block(const seer_hookset_t *hs, int n, int layers) {
    int b = seer_hookset_blocks_alike(hs, NULL, n, layers);
    return b >= 1 && b < layers ? b : 0;
}

/* forward(ids [, hidden_states [, hooks [, batch [, stop_at_layer [, start_at_layer, resid [, donors [, keep]]]]]]]) -> logits [n, vocab] for a
 * fresh sequence (no cache carried over); with hidden_states true also a Lua array of num_layers + 1 tensors
 * [n, hidden_size] as Hugging Face's output_hidden_states: index 1 = embeddings, index i + 1 =
 * residual after layer i - 1, except the last, which is the last layer's output after the
 * final norm (what the head reads; blocks.{L-1}.hook_resid_post is before it). hooks: a
 * list of {hook name, intervention} (seer_hooks_lua_build); batch: the sequence's 1-based index
 * in a batch, for hook functions; stop_at_layer (stop_arg): nil logits where the pass stopped;
 * start_at_layer (from_arg) with resid, the [n, hidden_size] residual entering that block
 * (seer_fwd_hooks_t.from; ids: n valid ids, not read). donors: a list of kept entries
 * (fwdkeep_ud) and generators (their kept residuals, bres) this call may run from: the one of
 * its tokens and model state giving the most blocks below which its hooks and the entry's do the
 * same (then the logits are the whole pass's, bit for bit, and a third result names the entry's
 * index); keep: the call returns, second, an entry of its own
 * (or nil: its hooks act at the embeddings or in block 0, or nowhere in a block; or no further
 * than the entry it ran from). Neither with hidden_states, stop_at_layer or start_at_layer, nor
 * on a GPU model. */
static int l_forward(lua_State *L) {
    lua_settop(L, 10); /* fixed argument slots: read_ids pushes above them */
    seer_model_t *m = check_model(L, 1);
    const seer_model_config_t *c = seer_model_config(m);
    int want_hidden = lua_toboolean(L, 3);
    int batch = (int)seer_lua_optint(L, 5, 1, 1, INT32_MAX, "forward: batch") - 1;
    int stop = stop_arg(L, 6, m, "forward: stop_at_layer");
    int from = from_arg(L, 7, m);
    if (stop && want_hidden) return luaL_error(L, "forward: stop_at_layer and hidden_states cannot be asked together");
    int n;
    int32_t *ids = read_ids(L, 2, &n);
    if (n == 0) return luaL_error(L, "forward: empty token list");
    const float *resid = from ? resid_arg(L, 8, m, n, 1) : NULL;
    seer_hookset_t *hs = seer_hooks_lua_build(L, 4, c->num_layers, seer_model_hook_mask(m));
    seer_fwd_hooks_t hk = {.set = hs, .prompt_len = n, .batch = batch, .user = L, .stop = stop, .from = from, .resid = resid};
    seer_err_t err;
    seer_kv_cache_t *kv = NULL;
    int64_t shape[2] = {n, c->vocab_size};
    int64_t hshape[3] = {c->num_layers + 1, n, c->hidden_size};
    seer_tensor_t *t = stop ? NULL : seer_tensor_new(SEER_F32, 2, shape); /* a stopped pass makes no logits */
    seer_tensor_t *h = want_hidden ? seer_tensor_new(SEER_F32, 3, hshape) : NULL;
    int rc = (t || stop) && (h || !want_hidden) ? seer_kv_cache_new(&kv, m, n, &err) : seer_err_set(&err, SEER_ENOMEM, "out of memory");
    /* a kept residual to run from, and one to keep */
    int reuse = rc == 0 && !want_hidden && !stop && !from && seer_kv_cache_host(kv);
    int took = 0, at = 0, own = 0;
    uint64_t epoch = seer_model_state_epoch(m);
    const float *dres = NULL;
    if (reuse && lua_istable(L, 9)) {
        int first = seer_hookset_blocks_alike(NULL, hs, n, c->num_layers); /* nothing acts before it */
        for (int i = 1; i <= (int)lua_objlen(L, 9); i++) {
            lua_rawgeti(L, 9, i);
            const fwdkeep_ud *k = luaL_testudata(L, -1, FWDKEEP_MT);
            const gen_ud *g = k ? NULL : luaL_testudata(L, -1, GEN_MT);
            lua_pop(L, 1); /* the list in slot 9 keeps it alive */
            if (k) {
                if (!k->res || k->m != m || k->epoch != epoch || k->n != n || k->block <= took || k->block > first ||
                    memcmp(k->ids, ids, sizeof(int32_t) * (size_t)n) != 0)
                    continue;
                dres = k->res, took = k->block, at = i;
            } else if (g) {
                /* a generation's prompt and the residual it kept (bres, computed with its KV rows
                 * under kepoch): usable where its hooks and this call's do the same below that
                 * block (both may act there: the same objects at the same points) */
                if (!g->bres || !g->cache || g->m != m || !g->prefilled || g->kepoch != epoch || g->nprompt != n ||
                    g->bblock <= took || memcmp(g->hist, ids, sizeof(int32_t) * (size_t)n) != 0 ||
                    seer_hookset_blocks_alike(g->hooks, hs, n, c->num_layers) < g->bblock)
                    continue;
                dres = g->bres, took = g->bblock, at = i;
            }
        }
    }
    if (dres) hk.from = took + 1, hk.resid = dres;
    fwdkeep_ud *mine = NULL;
    if (reuse && lua_toboolean(L, 10) && (own = first_hooked_block(hs, n, c->num_layers)) > took) {
        mine = lua_newuserdata(L, sizeof *mine);
        memset(mine, 0, sizeof *mine);
        luaL_getmetatable(L, FWDKEEP_MT);
        lua_setmetatable(L, -2);
        lua_replace(L, 10); /* slot 10 holds it from here */
        mine->bytes = sizeof *mine + sizeof(int32_t) * (size_t)n + sizeof(float) * (size_t)n * (size_t)c->hidden_size;
        mine->ids = malloc(sizeof(int32_t) * (size_t)n);
        mine->res = malloc(sizeof(float) * (size_t)n * (size_t)c->hidden_size);
        if (!mine->ids || !mine->res) mine = NULL, own = 0; /* none kept: later calls compute their own */
    }
    if (rc == 0 && (dres || mine)) {
        seer_batch_seq_t q = {.cache = kv, .tokens = ids, .n = n, .logits = seer_tensor_data(t), .all_logits = 1, .hk = &hk,
                              .save_block = mine ? own : 0, .save = mine ? mine->res : NULL};
        rc = seer_model_forward_batch(m, &q, 1, &err);
    } else if (rc == 0) {
        rc = seer_model_forward_hooked(m, kv, ids, n, t ? seer_tensor_data(t) : NULL, 1, h ? seer_tensor_data(h) : NULL, &hk, &err);
    }
    if (rc == 0 && dres) { /* its interventions count the rows below as if it had run them */
        seer_hookset_credit_blocks(hs, n, n, took);
        __atomic_add_fetch(&g_shared_block_rows, (uint64_t)n * (uint64_t)took, __ATOMIC_RELAXED);
    }
    seer_kv_cache_free(kv);
    seer_hookset_free(hs);
    if (rc < 0) {
        seer_tensor_release(t);
        seer_tensor_release(h);
        return raise_err(L, &err);
    }
    if (!t) {
        lua_pushnil(L);
        return 1;
    }
    seer_tensor_push(L, t);
    seer_tensor_release(t);
    if (reuse && (mine || dres)) {
        if (mine) {
            memcpy(mine->ids, ids, sizeof(int32_t) * (size_t)n);
            mine->m = m, mine->n = n, mine->block = own, mine->epoch = epoch;
            lua_pushvalue(L, 10);
        } else {
            lua_pushnil(L);
        }
        if (dres) lua_pushinteger(L, at);
        else lua_pushnil(L);
        return 3;
    }
    if (!h) return 1;
    {
        /* the last entry through the final norm, as transformers' models append it */
        size_t per = (size_t)n * (size_t)c->hidden_size;
        float *last = (float *)seer_tensor_data(h) + (size_t)c->num_layers * per;
        float *tmp = malloc(sizeof(float) * per);
        if (!tmp) {
            seer_tensor_release(h);
            return luaL_error(L, "forward: out of memory for the hidden states");
        }
        memcpy(tmp, last, sizeof(float) * per);
        seer_fwd_final_norm(m, last, tmp, n);
        free(tmp);
    }
    lua_createtable(L, c->num_layers + 1, 0);
    for (int i = 0; i <= c->num_layers; i++) {
        seer_tensor_t *v;
        if (seer_tensor_select(&v, h, 0, i, &err) < 0) {
            seer_tensor_release(h);
            return luaL_error(L, "%s", err.msg);
        }
        seer_tensor_push(L, v);
        seer_tensor_release(v);
        lua_rawseti(L, -2, i + 1);
    }
    seer_tensor_release(h);
    return 2;
}

/* Hook sets built for one batched call, freed with the userdata that holds them (so a Lua error
 * while building the next one, or in a hook, cannot leak them). */
typedef struct {
    int n;
    seer_hookset_t *set[];
} hooksets_ud;

static int l_hooksets_gc(lua_State *L) {
    hooksets_ud *u = luaL_checkudata(L, 1, HOOKSETS_MT);
    for (int i = 0; i < u->n; i++) seer_hookset_free(u->set[i]);
    u->n = 0;
    return 0;
}

/* The block a donor saves its residual at, for takers that could start at blocks L[0..k) (each
 * its first block that differs from the donor, seer_hookset_blocks_alike): the S that saves the
 * most (S times the takers with L >= S; the lowest S of a tie). A steering sweep's takers all
 * give one L; a layer sweep's give many, and one saved residual serves those from S up. */
static int best_save_block(const int *L, int k) {
    int best = 0;
    long most = 0;
    for (int a = 0; a < k; a++) {
        long c = 0;
        for (int b = 0; b < k; b++) c += L[b] >= L[a];
        if (c * L[a] > most || (c * L[a] == most && L[a] < best)) most = c * L[a], best = L[a];
    }
    return best;
}

/* One batched forward call whose sequences share what they compute alike (forward_batch's share
 * argument: Lua found no function hook and no capture on two sequences, so no hook's calls
 * across sequences can come in another order). Among sequences with the same tokens, the first
 * that computes from the embeddings is a donor: a later one whose hooks do the same to every
 * position and record nothing (seer_hookset_same_on_prompt) copies its logits; one whose hooks
 * agree below block L (seer_hookset_blocks_alike) runs from block S <= L on the residual the
 * donor saved entering S (save_block), in a pass per S after the first pass: the rows and hooks
 * from S are those of its whole pass, so its logits are that pass's, bit for bit. Interventions
 * below S count their rows as if the taker had run them (seer_hookset_credit_blocks), and
 * core.shared_prefills() counts what was taken. seqs' caches are fresh; a taker's cache holds
 * only its blocks from S, which nothing reads after the call. */
static int forward_shared(lua_State *L, seer_model_t *m, seer_batch_seq_t *seqs, seer_fwd_hooks_t *hks, int ns,
                          seer_err_t *err) {
    const seer_model_config_t *c = seer_model_config(m);
    int layers = c->num_layers;
    /* donor[i]: the sequence i takes from, or -1; blk[i]: -1 its whole pass, else the blocks */
    int *donor = lua_newuserdata(L, sizeof(int) * (size_t)ns * 4);
    int *blk = donor + ns, *save = blk + ns, *cand = save + ns;
    seer_batch_seq_t *run = lua_newuserdata(L, sizeof(seer_batch_seq_t) * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        donor[i] = -1, blk[i] = save[i] = 0;
        const seer_fwd_hooks_t *hi = &hks[i];
        for (int j = 0; j < i; j++) {
            if (donor[j] >= 0 || seqs[j].n != seqs[i].n ||
                memcmp(seqs[j].tokens, seqs[i].tokens, sizeof(int32_t) * (size_t)seqs[i].n) != 0)
                continue;
            const seer_fwd_hooks_t *hj = &hks[j];
            if (seer_hookset_same_on_prompt(hj->set, hi->set, seqs[i].n)) {
                donor[i] = j, blk[i] = -1;
                break;
            }
            int b = seer_hookset_blocks_alike(hj->set, hi->set, seqs[i].n, layers);
            if (b > 0 && (donor[i] < 0 || b > blk[i])) donor[i] = j, blk[i] = b;
        }
    }
    /* each donor saves one residual: at the block that serves its takers best */
    for (int j = 0; j < ns; j++) {
        if (donor[j] >= 0) continue;
        int k = 0;
        for (int i = j + 1; i < ns; i++)
            if (donor[i] == j && blk[i] > 0) cand[k++] = blk[i];
        if (!k) continue;
        save[j] = best_save_block(cand, k);
        for (int i = j + 1; i < ns; i++)
            if (donor[i] == j && blk[i] > 0) {
                if (blk[i] >= save[j]) blk[i] = save[j];
                else donor[i] = -1, blk[i] = 0; /* differs below it: its whole pass */
            }
    }
    size_t row = (size_t)c->hidden_size;
    size_t floats = 0;
    for (int j = 0; j < ns; j++)
        if (donor[j] < 0 && save[j]) floats += (size_t)seqs[j].n * row;
    float *res = floats ? lua_newuserdata(L, sizeof(float) * floats) : NULL;
    float **at = lua_newuserdata(L, sizeof(float *) * (size_t)ns);
    int nb = 0;
    for (int j = 0; j < ns; j++) {
        if (donor[j] >= 0) continue;
        run[nb] = seqs[j];
        if (save[j]) {
            at[j] = res;
            res += (size_t)seqs[j].n * row;
            run[nb].save_block = save[j];
            run[nb].save = at[j];
        }
        nb++;
    }
    if (seer_model_forward_batch(m, run, nb, err) < 0) return -1;
    size_t vocab = (size_t)c->vocab_size;
    for (int i = 0; i < ns; i++)
        if (donor[i] >= 0 && blk[i] < 0) { /* the same pass as its donor's: its logits */
            memcpy(seqs[i].logits, seqs[donor[i]].logits, sizeof(float) * vocab * (size_t)seqs[i].n);
            seer_hookset_credit_rows(hks[i].set, seqs[i].n, seqs[i].n);
            __atomic_add_fetch(&g_shared_prefills, 1, __ATOMIC_RELAXED);
        }
    /* the takers of first blocks, one pass per block count (a pass starts every sequence at one
     * block) */
    for (;;) {
        int b0 = 0;
        nb = 0;
        for (int i = 0; i < ns; i++) {
            if (donor[i] < 0 || blk[i] <= 0 || (b0 && blk[i] != b0)) continue;
            b0 = blk[i];
            blk[i] = 0; /* run */
            hks[i].from = b0 + 1;
            hks[i].resid = at[donor[i]];
            seer_hookset_credit_blocks(hks[i].set, seqs[i].n, seqs[i].n, b0);
            __atomic_add_fetch(&g_shared_block_rows, (uint64_t)seqs[i].n * (uint64_t)b0, __ATOMIC_RELAXED);
            run[nb++] = seqs[i];
        }
        if (!nb) break;
        if (seer_model_forward_batch(m, run, nb, err) < 0) return -1;
    }
    return 0;
}

/* forward_batch({ids...}, hooks, batch, stop_at_layer, start_at_layer, {resid...}, share) -> {logits...}:
 * every sequence (a fresh cache each) in one batched forward call; logits i is [n_i, vocab].
 * hooks: nil, or a table whose entry i is sequence i's hook list ({hook name, intervention}
 * pairs; nil: none); hook functions see hook.batch = batch[i] (default i). stop_at_layer: as
 * forward's (an empty table of logits where the pass stopped); start_at_layer: as forward's, with
 * resid[i] sequence i's residual. share: sequences with the same tokens share what their hooks
 * compute alike (forward_shared; not with stop_at_layer or start_at_layer, nor on a GPU). */
static int l_forward_batch(lua_State *L) {
    seer_model_t *m = check_model(L, 1);
    int stop = stop_arg(L, 5, m, "forward: stop_at_layer");
    int from = from_arg(L, 6, m);
    int share = lua_toboolean(L, 8);
    lua_settop(L, 7); /* the slots below are numbered from here */
    if (from) luaL_checktype(L, 7, LUA_TTABLE);
    int bidx = lua_istable(L, 4) ? 4 : 0;
    const seer_model_config_t *c = seer_model_config(m);
    luaL_checktype(L, 2, LUA_TTABLE);
    int ns = (int)lua_objlen(L, 2);
    if (ns == 0) return luaL_error(L, "forward: an empty batch");
    int has_hooks = lua_istable(L, 3);
    hooksets_ud *hs = lua_newuserdata(L, sizeof *hs + sizeof(seer_hookset_t *) * (size_t)ns); /* 8 */
    hs->n = 0;
    luaL_getmetatable(L, HOOKSETS_MT);
    lua_setmetatable(L, -2);
    seer_batch_seq_t *seqs = lua_newuserdata(L, sizeof(seer_batch_seq_t) * (size_t)ns);    /* 9 */
    seer_fwd_hooks_t *hks = lua_newuserdata(L, sizeof(seer_fwd_hooks_t) * (size_t)ns);     /* 10 */
    seer_kv_cache_t **kvs = lua_newuserdata(L, sizeof(seer_kv_cache_t *) * (size_t)ns);    /* 11 */
    lua_createtable(L, ns, 0);                                                               /* 12: the results */
    lua_createtable(L, ns, 0);                                                               /* 13: id arrays */
    memset(kvs, 0, sizeof(seer_kv_cache_t *) * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        lua_rawgeti(L, 2, i + 1);
        if (!lua_istable(L, -1)) return luaL_error(L, "forward: sequence %d is not a list of token ids", i + 1);
        int n;
        int32_t *ids = read_ids(L, lua_gettop(L), &n);
        lua_rawseti(L, 13, i + 1); /* keeps the id array alive */
        lua_pop(L, 1);
        if (n == 0) return luaL_error(L, "forward: sequence %d has no tokens", i + 1);
        seer_hookset_t *set = NULL;
        if (has_hooks) {
            lua_rawgeti(L, 3, i + 1);
            set = seer_hooks_lua_build(L, lua_gettop(L), c->num_layers, seer_model_hook_mask(m));
            lua_pop(L, 1);
            hs->set[hs->n++] = set;
        }
        int b = i;
        if (bidx) {
            lua_rawgeti(L, bidx, i + 1);
            b = (int)seer_lua_optint(L, -1, i + 1, 1, INT32_MAX, "forward: batch index") - 1;
            lua_pop(L, 1);
        }
        const float *resid = NULL;
        if (from) {
            lua_rawgeti(L, 7, i + 1); /* the table in slot 7 keeps the tensor alive */
            resid = resid_arg(L, lua_gettop(L), m, n, i + 1);
            lua_pop(L, 1);
        }
        hks[i] = (seer_fwd_hooks_t){.set = set, .prompt_len = n, .batch = b, .user = L, .stop = stop, .from = from, .resid = resid};
        float *lg = NULL;
        if (!stop) { /* a stopped pass makes no logits */
            int64_t shape[2] = {n, c->vocab_size};
            seer_tensor_t *t = seer_tensor_new(SEER_F32, 2, shape);
            if (!t) return luaL_error(L, "forward: out of memory for the logits of sequence %d", i + 1);
            seer_tensor_push(L, t);
            seer_tensor_release(t);
            lua_rawseti(L, 12, i + 1);
            lg = seer_tensor_data(t);
        }
        seqs[i] = (seer_batch_seq_t){.tokens = ids, .n = n, .logits = lg, .all_logits = 1, .hk = &hks[i]};
    }
    seer_err_t err;
    int rc = 0;
    for (int i = 0; i < ns && rc == 0; i++)
        if ((rc = seer_kv_cache_new(&kvs[i], m, seqs[i].n, &err)) == 0) seqs[i].cache = kvs[i];
    if (rc == 0 && share && !stop && !from && ns > 1 && seer_kv_cache_host(kvs[0])) rc = forward_shared(L, m, seqs, hks, ns, &err);
    else if (rc == 0) rc = seer_model_forward_batch(m, seqs, ns, &err);
    for (int i = 0; i < ns; i++) seer_kv_cache_free(kvs[i]);
    if (rc < 0) return raise_err(L, &err);
    lua_pushvalue(L, 12);
    return 1;
}

/* ---- generator --------------------------------------------------------------------------------- */

static gen_ud *check_gen(lua_State *L, int idx) { return luaL_checkudata(L, idx, GEN_MT); }

/* A sampling option: a number from lo to hi, both finite (d when absent); range says so in
 * the error ("from 0 to 1", "> 0"). */
static float opt_num(lua_State *L, int t, const char *k, float d, double lo, double hi, const char *range) {
    lua_getfield(L, t, k);
    double v = d;
    if (!lua_isnil(L, -1)) {
        v = luaL_checknumber(L, -1);
        if (!(v >= lo && v <= hi)) /* NaN fails this too */
            luaL_error(L, "generate: %s must be a finite number %s, got %s", k, range, lua_tostring(L, -1));
    }
    lua_pop(L, 1);
    return (float)v;
}

/* A counting option: a whole number from lo to hi (d when absent). */
static int64_t opt_int(lua_State *L, int t, const char *k, int64_t d, int64_t lo, int64_t hi) {
    lua_getfield(L, t, k);
    char what[64];
    snprintf(what, sizeof what, "generate: %s", k);
    int64_t v = seer_lua_optint(L, -1, d, lo, hi, what);
    lua_pop(L, 1);
    return v;
}

/* generator(model, prompt_ids, opts): opts = {max_new_tokens, min_new_tokens, temperature, top_k, top_p, min_p,
 * repetition_penalty, seed, stop_ids = {...}, context}. Validated in lua/seer/model.lua. */
static int l_generator(lua_State *L) {
    lua_settop(L, 3);
    seer_model_t *m = check_model(L, 1);
    int n;
    int32_t *prompt = read_ids(L, 2, &n);
    luaL_checktype(L, 3, LUA_TTABLE);
    gen_ud *g = lua_newuserdata(L, sizeof *g);
    memset(g, 0, sizeof *g);
    g->model_ref = LUA_NOREF;
    luaL_getmetatable(L, GEN_MT);
    lua_setmetatable(L, -2);
    g->m = m;
    lua_pushvalue(L, 1);
    g->model_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    /* the prompt and the new tokens together index an int32 history */
    g->max_new = (int)opt_int(L, 3, "max_new_tokens", 20, 0, (int64_t)INT32_MAX - n);
    g->min_new = (int)opt_int(L, 3, "min_new_tokens", 0, 0, INT32_MAX);
    g->o.temperature = opt_num(L, 3, "temperature", 0, 0, FLT_MAX, ">= 0 (0 = greedy)");
    g->o.top_k = (int)opt_int(L, 3, "top_k", 0, 0, INT32_MAX);
    g->o.top_p = opt_num(L, 3, "top_p", 1, 0, 1, "from 0 to 1 (1 = off)");
    g->o.min_p = opt_num(L, 3, "min_p", 0, 0, 1, "from 0 to 1 (0 = off)");
    g->o.repetition_penalty = opt_num(L, 3, "repetition_penalty", 1, FLT_MIN, FLT_MAX, "> 0 (1 = off)");
    g->o.seed = (uint64_t)opt_int(L, 3, "seed", 0, INT64_MIN, INT64_MAX);
    g->batch = (int)opt_int(L, 3, "batch", 1, 1, INT32_MAX) - 1;
    lua_getfield(L, 3, "share_prompt");
    g->share = lua_toboolean(L, -1);
    lua_pop(L, 1);
    seer_rng_seed(&g->rng, g->o.seed);
    lua_getfield(L, 3, "stop_ids");
    if (lua_istable(L, -1)) {
        int ns = (int)lua_objlen(L, -1), room = (int)(sizeof g->stop_ids / sizeof g->stop_ids[0]);
        /* never dropped unseen: the generation would be answered as if they had not been given */
        if (ns > room) return luaL_error(L, "generate: %d stop token ids (the model's end-of-sequence ids included), more than the %d it takes", ns, room);
        for (int i = 0; i < ns && g->nstop < room; i++) {
            lua_rawgeti(L, -1, i + 1);
            g->stop_ids[g->nstop++] = (int)seer_lua_int(L, -1, INT32_MIN, INT32_MAX, "generate: stop token id");
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    lua_getfield(L, 3, "hooks");
    g->hooks = seer_hooks_lua_build(L, lua_gettop(L), seer_model_config(m)->num_layers, seer_model_hook_mask(m));
    lua_pop(L, 1);
    g->cap = n + g->max_new;
    g->hist = malloc(sizeof(int32_t) * (size_t)(g->cap > 0 ? g->cap : 1));
    g->logits = malloc(sizeof(float) * (size_t)seer_model_config(m)->vocab_size);
    if (!g->hist || !g->logits) return luaL_error(L, "out of memory");
    memcpy(g->hist, prompt, sizeof(int32_t) * (size_t)n);
    g->nhist = g->nprompt = n;
    if (n == 0) return luaL_error(L, "generate: the prompt has no tokens");
    seer_err_t err;
    if (seer_kv_cache_new(&g->cache, m, g->cap, &err) < 0) return luaL_error(L, "%s", err.msg);
    return 1;
}

/* After a forward step whose logits are in g->logits: samples, records and returns the next
 * token (-1: out of memory; SEER_SAMPLE_NONFINITE: no token can be chosen). */
static int gen_take(gen_ud *g) {
    g->prefilled = 1;
    int vocab = seer_model_config(g->m)->vocab_size;
    if (g->ngen < g->min_new) /* as transformers' min_new_tokens: stop tokens cannot win yet */
        for (int i = 0; i < g->nstop; i++)
            if (g->stop_ids[i] >= 0 && g->stop_ids[i] < vocab) g->logits[g->stop_ids[i]] = -INFINITY;
    int id = seer_sample(g->logits, vocab, g->hist, g->nhist, &g->o, &g->rng);
    if (id < 0) {
        g->done = 1;
        return id;
    }
    g->hist[g->nhist++] = id;
    g->ngen++;
    for (int i = 0; i < g->nstop; i++)
        if (g->stop_ids[i] == id) g->done = 1;
    return id;
}

/* The error of a failed gen_take (the generator has ended). */
static int gen_take_error(lua_State *L, const gen_ud *g, int id, int which) {
    if (id != SEER_SAMPLE_NONFINITE) return luaL_error(L, "generate: out of memory while sampling");
    char seq[48] = "";
    if (which > 0) snprintf(seq, sizeof seq, " of sequence %d", which);
    return luaL_error(L,
                      "generate: the logits for new token %d%s are not finite (NaN or infinity), so no token "
                      "can be chosen: the activations overflowed, or a hook or intervention wrote NaN or infinity "
                      "into them (model:run_with_cache shows where they stop being finite)",
                      g->ngen + 1, seq);
}

/* The generator whose prompt computation gs[i] may take instead of running its own prefill, or
 * -1. Both asked for it (share_prompt), on one CPU model, with the same prompt tokens and hook
 * sets that do the same to the prompt and record nothing (seer_hookset_same_on_prompt): then the donor's
 * cache rows of the prompt and its prompt logits are exactly what gs[i] would compute (the
 * forward pass is deterministic, and a sequence in a batch gets the bits it gets alone). A
 * donor is either prefilled in an earlier step, its prompt logits kept, under the model state
 * of now (epoch), or prefilled in this step (j < i, not itself taking from another). gs ends
 * with NULL. */
static int prompt_donor(gen_ud **gs, int i, const int *from, uint64_t epoch) {
    gen_ud *g = gs[i];
    if (!g->share || g->prefilled || !seer_kv_cache_host(g->cache)) return -1;
    int n = g->nprompt, now = -1;
    for (int j = 0; gs[j] != NULL; j++) {
        gen_ud *d = gs[j];
        if (j == i || !d->share || d->m != g->m || !d->cache || d->nprompt != n || !seer_kv_cache_host(d->cache)) continue;
        if (d->prefilled) {
            if (!d->plogits || d->pepoch != epoch || seer_kv_cache_len(d->cache) < n) continue;
        } else if (!(j < i && from[j] < 0 && !d->done)) {
            continue; /* not run in this step (finished, later in the list, or taking from another) */
        }
        if (memcmp(d->hist, g->hist, sizeof(int32_t) * (size_t)n) != 0 || !seer_hookset_same_on_prompt(d->hooks, g->hooks, n))
            continue;
        if (d->prefilled) return j; /* needs nothing from this step */
        if (now < 0) now = j;
    }
    return now;
}

/* The generator from whose prompt gs[i] may take its first *rows positions (a multiple of 64,
 * short of its whole prompt), or -1: one with the same first tokens (compared over both
 * prompts), hook sets that do the same to those positions (seer_hookset_same_on_rows, each with
 * its own prompt length), and a prompt whose whole pass computed those rows as gs[i]'s whole pass
 * would (seer_model_prefix_rows: the kernels' paths); the rest of gs[i]'s prompt then runs with
 * seer_batch_seq_t.paths, and every result is the bits it gets alone. A donor is prefilled (an
 * earlier step, or a kept prompt) under the model state of now, or computes its whole prompt in
 * this step (j < i: neither taking a prompt nor a prefix, whose rows are ready before the
 * prefixes are copied; pfx NULL: no such generator). The most rows win. */
static int prefix_donor(gen_ud **gs, int i, const int *from, const int *pfx, uint64_t epoch, int *rows) {
    gen_ud *g = gs[i];
    *rows = 0;
    if (!g->share || g->prefilled || !seer_kv_cache_host(g->cache) || g->nprompt <= SEER_PREFIX_BLOCK) return -1;
    int best = -1;
    for (int j = 0; gs[j] != NULL; j++) {
        gen_ud *d = gs[j];
        if (j == i || !d->share || d->m != g->m || !d->cache || !seer_kv_cache_host(d->cache)) continue;
        if (d->prefilled) {
            if (d->kepoch != epoch) continue;
        } else if (!(j < i && from[j] < 0 && (!pfx || pfx[j] == 0) && !d->done)) {
            continue;
        }
        int lo = d->nprompt < g->nprompt ? d->nprompt : g->nprompt, common = 0;
        if (lo <= *rows) continue;
        while (common < lo && d->hist[common] == g->hist[common]) common++;
        int k = seer_model_prefix_rows(g->m, d->nprompt, g->nprompt, common);
        if (d->prefilled && seer_kv_cache_len(d->cache) < k) continue;
        /* hooks that differ from some position on: fewer rows may still be the same */
        while (k > *rows && !seer_hookset_same_on_rows(d->hooks, d->nprompt, g->hooks, g->nprompt, k)) k -= SEER_PREFIX_BLOCK;
        if (k > *rows) *rows = k, best = j;
    }
    return best;
}

/* The generator from which gs[i] may take the first *blocks blocks of its prompt, or -1: one with
 * the same prompt tokens and hook sets that do the same to the prompt before block *blocks
 * (seer_hookset_blocks_alike: a steering sweep's sequences differ from their steered block on),
 * which either was prefilled (an earlier step, a kept prompt) under the model state of now and
 * holds the residual entering a block no higher (bres, bblock: it gives that many), or computes
 * its whole prompt from the embeddings in this step (j < i; busy[j] nonzero where it does not:
 * it takes a prompt, a prefix or blocks) and saves the residual entering the block its first
 * taker asks for (save[j]; a later taker takes that many where it can). gs[i] copies the keys
 * and values of the blocks below and runs its prompt from there on that residual
 * (cached_below), getting the bits of its whole pass. The most blocks win. busy and save may be
 * NULL (only prefilled donors: next). gs ends with NULL. */
static int block_donor(gen_ud **gs, int i, const char *busy, const int *save, uint64_t epoch, int *blocks) {
    gen_ud *g = gs[i];
    *blocks = 0;
    if (!g->share || g->prefilled || !seer_kv_cache_host(g->cache)) return -1;
    int n = g->nprompt, layers = seer_model_config(g->m)->num_layers, best = -1;
    for (int j = 0; gs[j] != NULL; j++) {
        gen_ud *d = gs[j];
        if (j == i || !d->share || d->m != g->m || !d->cache || !seer_kv_cache_host(d->cache) || d->nprompt != n) continue;
        int most; /* the blocks d can give */
        if (d->prefilled) {
            if (!d->bres || d->kepoch != epoch || seer_kv_cache_len(d->cache) < n) continue;
            most = d->bblock;
        } else {
            if (!busy || j > i || busy[j] || d->done) continue;
            most = save[j] ? save[j] : layers;
        }
        if (most <= *blocks || memcmp(d->hist, g->hist, sizeof(int32_t) * (size_t)n) != 0) continue;
        int b = seer_hookset_blocks_alike(d->hooks, g->hooks, n, layers);
        if (d->prefilled || save[j]) b = b >= most ? most : 0;
        if (b > *blocks) *blocks = b, best = j;
    }
    return best;
}

/* The block whose entering residual g keeps when it computes its prompt with no taker asking
 * for one: the first block its own hooks act on or record in (a steering sweep's steered
 * block), where a sequence with its prompt and other hooks from there could start; 0: none (no
 * hook acts on its prompt inside a block, or one acts on the embeddings or in block 0). */
static int own_block(const gen_ud *g) {
    return first_hooked_block(g->hooks, g->nprompt, seer_model_config(g->m)->num_layers);
}

/* Gives g room for the residual entering `block` of its prompt (bres); 0, or -1 without memory. */
static int room_for_block(gen_ud *g, int block) {
    size_t bytes = sizeof(float) * (size_t)g->nprompt * (size_t)seer_model_config(g->m)->hidden_size;
    if (!g->bres && !(g->bres = malloc(bytes))) return -1;
    g->bblock = block;
    return 0;
}

/* g's prompt is d's up to d's kept residual (g took d's whole prompt, or that many blocks): g
 * keeps a copy, to give those blocks on after d is gone; without memory it keeps none. */
static void copy_block(gen_ud *g, const gen_ud *d) {
    if (!d->bres || g->bres) return;
    if (room_for_block(g, d->bblock) < 0) return;
    memcpy(g->bres, d->bres, sizeof(float) * (size_t)g->nprompt * (size_t)seer_model_config(g->m)->hidden_size);
}

/* Keeps g's prompt logits (g->logits after its prefill, before sampling changes them) for later
 * generators with its prompt; without memory it keeps none (they compute their own). */
static void keep_prompt_logits(gen_ud *g, int vocab, uint64_t epoch) {
    if (!g->share) return;
    if (!g->plogits && !(g->plogits = malloc(sizeof(float) * (size_t)vocab))) return;
    memcpy(g->plogits, g->logits, sizeof(float) * (size_t)vocab);
    g->pepoch = epoch;
}

/* g takes d's prompt (prompt_donor found d): d's cache rows of the prompt and its prompt logits
 * (pl: d->logits for a donor prefilled in this very step, before it samples, else d->plogits). */
static int take_prompt(gen_ud *g, const gen_ud *d, const float *pl, int vocab, uint64_t epoch, seer_err_t *err) {
    int rc = seer_kv_cache_copy_prefix(g->cache, d->cache, g->nprompt, err);
    if (rc < 0) return rc;
    memcpy(g->logits, pl, sizeof(float) * (size_t)vocab);
    keep_prompt_logits(g, vocab, epoch);
    g->took = 1;
    g->took_rows = g->nprompt;
    g->kepoch = epoch;
    copy_block(g, d);
    /* its interventions' hit counts as if the prompt had run through them (the reached check) */
    seer_hookset_credit_rows(g->hooks, g->nprompt, g->nprompt);
    __atomic_add_fetch(&g_shared_prefills, 1, __ATOMIC_RELAXED);
    return 0;
}

/* g takes d's first `rows` prompt positions (prefix_donor found them) and sets up q to run the
 * rest of its prompt as its whole prompt's pass would (paths); hk: its hooks for that pass. */
static int take_prefix(gen_ud *g, const gen_ud *d, int rows, seer_batch_seq_t *q, seer_fwd_hooks_t *hk, void *user,
                       seer_err_t *err) {
    int rc = seer_kv_cache_copy_prefix(g->cache, d->cache, rows, err);
    if (rc < 0) return rc;
    g->took_rows = rows;
    seer_hookset_credit_rows(g->hooks, g->nprompt, rows);
    __atomic_add_fetch(&g_shared_prefix_rows, (uint64_t)rows, __ATOMIC_RELAXED);
    *hk = (seer_fwd_hooks_t){.set = g->hooks, .prompt_len = g->nprompt, .batch = g->batch, .user = user};
    *q = (seer_batch_seq_t){.cache = g->cache, .tokens = g->hist + rows, .n = g->nprompt - rows, .logits = g->logits,
                            .hk = hk, .paths = g->nprompt};
    return 0;
}

/* g takes the first `blocks` blocks of d's prompt (block_donor found d): the keys and values of
 * those blocks, a copy of d's residual entering block `blocks` (d->bres: kept, or saved by d's
 * pass of this step), and q to run its prompt from there with its own hooks (hk). */
static int take_blocks(gen_ud *g, const gen_ud *d, int blocks, seer_batch_seq_t *q, seer_fwd_hooks_t *hk, void *user,
                       seer_err_t *err) {
    int rc = seer_kv_cache_copy_blocks(g->cache, d->cache, g->nprompt, blocks, err);
    if (rc < 0) return rc;
    g->took_blocks = blocks;
    copy_block(g, d);
    seer_hookset_credit_blocks(g->hooks, g->nprompt, g->nprompt, blocks);
    __atomic_add_fetch(&g_shared_block_rows, (uint64_t)g->nprompt * (uint64_t)blocks, __ATOMIC_RELAXED);
    *hk = (seer_fwd_hooks_t){.set = g->hooks, .prompt_len = g->nprompt, .batch = g->batch, .user = user, .from = blocks + 1,
                             .resid = d->bres};
    *q = (seer_batch_seq_t){.cache = g->cache, .tokens = g->hist, .n = g->nprompt, .logits = g->logits, .hk = hk,
                            .cached_below = 1};
    return 0;
}

/* next([donors]) -> token id, or nil when max_new_tokens is reached or a stop token was produced
 * (the stop token itself is returned first, then nil). donors: a list of finished generators
 * (made with share_prompt, as this one) whose prompt this one's first step may take instead of
 * computing it (prompt_donor; a model's prompt cache, lua/seer/model.lua). */
static int l_gen_next(lua_State *L) {
    gen_ud *g = check_gen(L, 1);
    if (g->done || g->ngen >= g->max_new) {
        g->done = 1;
        lua_pushnil(L);
        return 1;
    }
    /* One check per step: an interrupt ends a generation within one token even when the loop
     * that drives it is JIT-compiled Lua, where the interrupt hook never runs. The state is
     * untouched, so a caller that catches the error may go on. */
    if (seer_host_interrupted()) {
        seer_err_t e;
        seer_err_set(&e, SEER_EINTR, "interrupted");
        return raise_err(L, &e);
    }
    seer_err_t err;
    int rc, vocab = seer_model_config(g->m)->vocab_size;
    uint64_t epoch = seer_model_state_epoch(g->m);
    if (!g->prefilled && g->share && lua_istable(L, 2)) {
        int nd = (int)lua_objlen(L, 2);
        gen_ud **gs = lua_newuserdata(L, sizeof(gen_ud *) * (size_t)(nd + 2));
        int *from = lua_newuserdata(L, sizeof(int) * (size_t)(nd + 1));
        gs[0] = g;
        from[0] = -1;
        for (int i = 0; i < nd; i++) {
            lua_rawgeti(L, 2, i + 1);
            gs[i + 1] = luaL_checkudata(L, -1, GEN_MT);
            lua_pop(L, 1);
            from[i + 1] = -1;
            if (!gs[i + 1]->cache || gs[i + 1] == g) return luaL_error(L, "generate: donor %d is freed or the generator itself", i + 1);
        }
        gs[nd + 1] = NULL;
        int j = prompt_donor(gs, 0, from, epoch); /* only donors prefilled before: j > 0 */
        if (j > 0) {
            if (take_prompt(g, gs[j], gs[j]->plogits, vocab, epoch, &err) < 0) {
                g->done = 1;
                return raise_err(L, &err);
            }
            g->donor_at = j;
            goto sample;
        }
        /* a beginning, or the first blocks, of a prefilled donor's prompt: the rest in one pass */
        int rows, blocks, took = 1;
        seer_batch_seq_t q;
        seer_fwd_hooks_t hk;
        if ((j = prefix_donor(gs, 0, from, NULL, epoch, &rows)) > 0) took = take_prefix(g, gs[j], rows, &q, &hk, L, &err);
        else if ((j = block_donor(gs, 0, NULL, NULL, epoch, &blocks)) > 0) took = take_blocks(g, gs[j], blocks, &q, &hk, L, &err);
        if (took <= 0) {
            if (took < 0 || seer_model_forward_batch(g->m, &q, 1, &err) < 0) {
                g->done = 1;
                return raise_err(L, &err);
            }
            keep_prompt_logits(g, vocab, epoch);
            g->kepoch = epoch;
            g->donor_at = j;
            goto sample;
        }
    }
    {
        int first = !g->prefilled;
        seer_fwd_hooks_t hk = {.set = g->hooks, .prompt_len = g->nprompt, .batch = g->batch, .user = L};
        if (first) {
            /* a prompt that may give keeps the residual entering its first hooked block (own_block) */
            int block = g->share && seer_kv_cache_host(g->cache) ? own_block(g) : 0;
            if (block && room_for_block(g, block) < 0) block = 0;
            seer_batch_seq_t q = {.cache = g->cache, .tokens = g->hist, .n = g->nhist, .logits = g->logits, .hk = &hk,
                                  .save_block = block, .save = g->bres};
            rc = block ? seer_model_forward_batch(g->m, &q, 1, &err)
                       : seer_model_forward_hooked(g->m, g->cache, g->hist, g->nhist, g->logits, 0, NULL, &hk, &err);
        } else {
            rc = seer_model_forward_hooked(g->m, g->cache, g->hist + g->nhist - 1, 1, g->logits, 0, NULL, &hk, &err);
        }
        if (rc < 0) {
            g->done = 1; /* a failed step (a hook raised) ends the generation */
            return raise_err(L, &err);
        }
        if (first) {
            keep_prompt_logits(g, vocab, epoch);
            g->kepoch = epoch;
        }
    }
sample:;
    int id = gen_take(g);
    if (id < 0) return gen_take_error(L, g, id, 0);
    lua_pushinteger(L, id);
    return 1;
}

/* The sampling of a batch's step, a range of its generators per thread. */
typedef struct {
    gen_ud **gs;
    const char *stepped;
    int *ids;
} take_job;
static void take_chunk(void *ctx, size_t begin, size_t end, int thread) {
    (void)thread;
    take_job *j = ctx;
    for (size_t i = begin; i < end; i++)
        if (j->stepped[i]) j->ids[i] = gen_take(j->gs[i]);
}

/* A pass of step_batch over the prompts that took part of their computation (first blocks, a
 * beginning), set up in seqs for gs[which[..]] (ok 0: setting one up failed, err says why):
 * their prompt logits are kept; on failure the step's generations end (-1, err set). */
static int takers_pass(seer_model_t *m, gen_ud **gs, const char *stepped, int ng, const seer_batch_seq_t *seqs,
                       const int *which, int nb, int ok, int vocab, uint64_t epoch, seer_err_t *err) {
    if (!ok || seer_model_forward_batch(m, seqs, nb, err) < 0) {
        for (int i = 0; i < ng; i++)
            if (stepped[i]) gs[i]->done = 1;
        return -1;
    }
    for (int b = 0; b < nb; b++) {
        keep_prompt_logits(gs[which[b]], vocab, epoch);
        gs[which[b]]->kepoch = epoch;
    }
    return 0;
}

/* gens:step() over a list of generators: one batched forward call advances every generator
 * that is not finished by one token (its prefill on the first step), then each samples with
 * its own options and RNG, so every generator produces exactly the tokens it would alone.
 * Generators made with share_prompt whose prompt and hooks are another's of the list take that
 * one's prompt cache and logits instead of running their prefill (prompt_donor); a finished
 * generator in the list can still give its prompt.
 * step_batch(list) -> ids, ended: lists of the same length; ids[i] the new token id, or false
 * for a generator that had finished (max_new_tokens, a stop token, or finish()); ended[i]
 * whether generator i has finished now. */
static int l_gen_step_batch(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int ng = (int)lua_objlen(L, 1);
    if (ng == 0) {
        lua_newtable(L);
        return 1;
    }
    gen_ud **gs = lua_newuserdata(L, sizeof(gen_ud *) * (size_t)(ng + 1));
    seer_batch_seq_t *seqs = lua_newuserdata(L, sizeof(seer_batch_seq_t) * (size_t)ng);
    seer_fwd_hooks_t *hks = lua_newuserdata(L, sizeof(seer_fwd_hooks_t) * (size_t)ng);
    int *which = lua_newuserdata(L, sizeof(int) * (size_t)ng);
    int *from = lua_newuserdata(L, sizeof(int) * (size_t)ng); /* the donor of a taken prompt, or -1 */
    int *pfrom = lua_newuserdata(L, sizeof(int) * (size_t)ng); /* the donor of a taken prefix, or -1 */
    int *pfx = lua_newuserdata(L, sizeof(int) * (size_t)ng);   /* its rows, or 0 */
    int *bfrom = lua_newuserdata(L, sizeof(int) * (size_t)ng); /* the donor of taken first blocks, or -1 */
    int *blk = lua_newuserdata(L, sizeof(int) * (size_t)ng);   /* how many blocks it takes, or 0 */
    int *save = lua_newuserdata(L, sizeof(int) * (size_t)ng);  /* the block whose residual it saves, or 0 */
    char *busy = lua_newuserdata(L, (size_t)ng); /* takes a prompt, a prefix or blocks in this step */
    char *stepped = lua_newuserdata(L, (size_t)ng);
    int *takes = lua_newuserdata(L, sizeof(int) * (size_t)ng); /* each stepped one's sampled id */
    seer_model_t *m = NULL;
    int nb = 0, ntaken = 0, nprefix = 0, nblocks = 0;
    for (int i = 0; i < ng; i++) {
        lua_rawgeti(L, 1, i + 1);
        gs[i] = luaL_checkudata(L, -1, GEN_MT);
        lua_pop(L, 1);
        gen_ud *g = gs[i];
        if (!g->cache) return luaL_error(L, "generate: generator %d was freed", i + 1);
        if (m && g->m != m) return luaL_error(L, "generate: the generators of a batch must share one model");
        m = g->m;
        for (int j = 0; j < i; j++)
            if (gs[j] == g) return luaL_error(L, "generate: generator %d appears twice in the batch", i + 1);
    }
    gs[ng] = NULL;
    uint64_t epoch = seer_model_state_epoch(m);
    for (int i = 0; i < ng; i++) {
        gen_ud *g = gs[i];
        from[i] = pfrom[i] = bfrom[i] = -1;
        pfx[i] = blk[i] = save[i] = 0;
        busy[i] = 1;
        stepped[i] = 0;
        if (g->done || g->ngen >= g->max_new) {
            g->done = 1;
            continue;
        }
        stepped[i] = 1;
        if ((from[i] = prompt_donor(gs, i, from, epoch)) >= 0) {
            ntaken++;
            continue;
        }
        if ((pfrom[i] = prefix_donor(gs, i, from, pfx, epoch, &pfx[i])) >= 0) {
            nprefix++;
            continue;
        }
        if ((bfrom[i] = block_donor(gs, i, busy, save, epoch, &blk[i])) >= 0) {
            gen_ud *d = gs[bfrom[i]];
            if (!d->prefilled && !save[bfrom[i]]) save[bfrom[i]] = blk[i]; /* its pass saves the residual there */
            nblocks++;
            continue;
        }
        busy[i] = 0;
        hks[nb] = (seer_fwd_hooks_t){.set = g->hooks, .prompt_len = g->nprompt, .batch = g->batch, .user = L};
        seqs[nb] = (seer_batch_seq_t){.cache = g->cache,
                                      .tokens = g->prefilled ? g->hist + g->nhist - 1 : g->hist,
                                      .n = g->prefilled ? 1 : g->nhist,
                                      .logits = g->logits,
                                      .hk = &hks[nb]};
        which[nb++] = i;
    }
    /* each prompt computed from the embeddings keeps the residual entering the block a taker of
     * this step asks for, or else its own first hooked block (own_block), for takers to come */
    for (int b = 0; b < nb; b++) {
        int i = which[b];
        gen_ud *g = gs[i];
        if (g->prefilled || !g->share || !seer_kv_cache_host(g->cache)) continue;
        int block = save[i] ? save[i] : own_block(g);
        if (!block) continue;
        if (room_for_block(g, block) < 0) {
            if (!save[i]) continue; /* none kept: later prompts compute their own */
            for (int k = 0; k < ng; k++)
                if (stepped[k]) gs[k]->done = 1;
            return luaL_error(L, "generate: out of memory for a prompt's residual (%d positions)", g->nprompt);
        }
        seqs[b].save_block = block;
        seqs[b].save = g->bres;
    }
    if (seer_host_interrupted()) {
        seer_err_t e;
        seer_err_set(&e, SEER_EINTR, "interrupted");
        return raise_err(L, &e);
    }
    seer_err_t err;
    if (nb > 0 && seer_model_forward_batch(m, seqs, nb, &err) < 0) {
        for (int i = 0; i < ng; i++)
            if (stepped[i]) gs[i]->done = 1; /* a failed step ends the generations */
        return raise_err(L, &err);
    }
    int vocab = seer_model_config(m)->vocab_size;
    for (int b = 0; b < nb; b++)
        if (!gs[which[b]]->prefilled) {
            keep_prompt_logits(gs[which[b]], vocab, epoch);
            gs[which[b]]->kepoch = epoch;
        }
    /* then the prompts that took their first blocks: each from its block on, one pass per block
     * count (a pass starts every sequence at one block) */
    for (int left = nblocks; left > 0; left -= nb) {
        int b0 = 0, bad = 0;
        nb = 0;
        for (int i = 0; i < ng && !bad; i++) {
            if (bfrom[i] < 0 || blk[i] <= 0 || (b0 && blk[i] != b0)) continue;
            b0 = blk[i];
            blk[i] = -b0; /* run */
            bad = take_blocks(gs[i], gs[bfrom[i]], b0, &seqs[nb], &hks[nb], L, &err) < 0;
            gs[i]->donor_at = bfrom[i] + 1;
            which[nb++] = i;
        }
        if (takers_pass(m, gs, stepped, ng, seqs, which, nb, !bad, vocab, epoch, &err) < 0) return raise_err(L, &err);
    }
    /* then the prompts that took a prefix: the rest of each, in one more pass (their donors' rows
     * are all there now) */
    if (nprefix > 0) {
        nb = 0;
        for (int i = 0; i < ng; i++) {
            if (pfrom[i] < 0) continue;
            if (take_prefix(gs[i], gs[pfrom[i]], pfx[i], &seqs[nb], &hks[nb], L, &err) < 0) break;
            gs[i]->donor_at = pfrom[i] + 1;
            which[nb++] = i;
        }
        if (takers_pass(m, gs, stepped, ng, seqs, which, nb, nb == nprefix, vocab, epoch, &err) < 0) return raise_err(L, &err);
    }
    for (int i = 0; ntaken > 0 && i < ng; i++) {
        if (from[i] < 0) continue;
        gen_ud *g = gs[i], *d = gs[from[i]];
        /* a donor of this step has its prompt logits in d->logits until it samples (below) */
        if (take_prompt(g, d, d->prefilled ? d->plogits : d->logits, vocab, epoch, &err) < 0) {
            for (int k = 0; k < ng; k++)
                if (stepped[k]) gs[k]->done = 1;
            return raise_err(L, &err);
        }
        g->donor_at = from[i] + 1;
    }
    lua_createtable(L, ng, 0);
    for (int i = 0; i < ng; i++) {
        lua_pushboolean(L, 0);
        lua_rawseti(L, -2, i + 1);
    }
    lua_createtable(L, ng, 0);
    for (int i = 0; i < ng; i++) {
        lua_pushboolean(L, 1);
        lua_rawseti(L, -2, i + 1);
    }
    /* every stepped sequence samples its next token on the model's threads: each has its own
     * logits, history and generator, so a pick does not depend on which thread makes it; at
     * temperature > 0 each sorts the vocabulary (sample.c) */
    take_job tj = {.gs = gs, .stepped = stepped, .ids = takes};
    int sampled = 0;
    for (int i = 0; i < ng; i++) sampled += stepped[i] && gs[i]->o.temperature > 0;
    if (sampled > 1 && m->pool) seer_pool_for(m->pool, (size_t)ng, 1, take_chunk, &tj);
    else take_chunk(&tj, 0, (size_t)ng, 0);
    for (int i = 0; i < ng; i++) {
        if (!stepped[i]) continue;
        gen_ud *g = gs[i];
        int id = takes[i];
        if (id < 0) {
            for (int k = 0; k < ng; k++)
                if (stepped[k]) gs[k]->done = 1; /* as a failed step: the whole batch ends */
            return gen_take_error(L, g, id, i + 1);
        }
        lua_pushinteger(L, id);
        lua_rawseti(L, -3, i + 1);
        lua_pushboolean(L, g->done || g->ngen >= g->max_new);
        lua_rawseti(L, -2, i + 1);
    }
    return 2;
}

/* took_prompt() -> whether this generator's prompt was taken from another's (not computed), how
 * many of its first positions were (all of them, the first rows of a shared prefix, or 0), when
 * it took any, the 1-based index of the generator they came from in the list of its first step
 * (next's donors, or the list given to step_batch), else nil: the prompt cache moves that entry
 * to its front; and how many first blocks of its prompt it took from another (block_donor; 0:
 * none), computing only the blocks after them. */
static int l_gen_took_prompt(lua_State *L) {
    gen_ud *g = check_gen(L, 1);
    lua_pushboolean(L, g->took);
    lua_pushinteger(L, g->took_rows);
    if (g->donor_at > 0) lua_pushinteger(L, g->donor_at);
    else lua_pushnil(L);
    lua_pushinteger(L, g->took_blocks);
    return 4;
}

/* prompt_logits() -> a [vocab] tensor of its prompt's logits as its prefill left them (computed,
 * or taken), or nil where none were kept (made without share_prompt, not prefilled yet, no
 * memory): what a shared prompt must equal, bit for bit (the tests compare it with forward). */
static int l_gen_prompt_logits(lua_State *L) {
    gen_ud *g = check_gen(L, 1);
    if (!g->plogits) {
        lua_pushnil(L);
        return 1;
    }
    int64_t shape[1] = {seer_model_config(g->m)->vocab_size};
    seer_tensor_t *t = seer_tensor_new(SEER_F32, 1, shape);
    if (!t) return luaL_error(L, "prompt_logits: out of memory");
    memcpy(seer_tensor_data(t), g->plogits, sizeof(float) * (size_t)shape[0]);
    seer_tensor_push(L, t);
    seer_tensor_release(t);
    return 1;
}

/* prompt_fresh() -> whether its kept prompt logits were computed under the model's state of now
 * (seer_model_state_epoch): only then can it give its prompt. */
static int l_gen_prompt_fresh(lua_State *L) {
    gen_ud *g = check_gen(L, 1);
    lua_pushboolean(L, g->plogits && g->pepoch == seer_model_state_epoch(g->m));
    return 1;
}

/* keep_prompt() -> bytes, or nil: ends the generator and shrinks it to a donor of its prompt: its
 * KV cache is replaced by one holding only the prompt's positions (the room for the new tokens
 * is given back). nil, changing nothing, where it cannot give its prompt:
 * made without share_prompt, never prefilled, its prompt logits not kept, a capture or function
 * hook acting on its prompt, or on a GPU. bytes:
 * what the donor now holds (the cache, the prompt logits, the residual it keeps: bres). */
static int l_gen_keep_prompt(lua_State *L) {
    gen_ud *g = check_gen(L, 1);
    /* a capture or callback acting on its prompt: no generator could take it (prompt_donor) */
    if (!g->share || !g->prefilled || !g->plogits || !g->cache || !seer_kv_cache_host(g->cache) ||
        !seer_hookset_same_on_prompt(g->hooks, g->hooks, g->nprompt)) {
        lua_pushnil(L);
        return 1;
    }
    g->done = 1;
    seer_kv_cache_t *c = NULL;
    seer_err_t err;
    if (seer_kv_cache_len(g->cache) > g->nprompt) {
        if (seer_kv_cache_new(&c, g->m, g->nprompt, &err) < 0) { /* no memory for the copy: keep it as it is */
            lua_pushnil(L);
            return 1;
        }
        if (seer_kv_cache_copy_prefix(c, g->cache, g->nprompt, &err) < 0) {
            seer_kv_cache_free(c);
            return raise_err(L, &err);
        }
        seer_kv_cache_free(g->cache);
        g->cache = c;
    }
    lua_pushnumber(L, (lua_Number)seer_kv_cache_bytes(g->cache) +
                          (lua_Number)sizeof(float) * seer_model_config(g->m)->vocab_size +
                          (g->bres ? (lua_Number)sizeof(float) * g->nprompt * seer_model_config(g->m)->hidden_size : 0));
    return 1;
}

/* finish(): no more tokens from this generator (a stop string was found). */
static int l_gen_finish(lua_State *L) {
    check_gen(L, 1)->done = 1;
    return 0;
}

/* ended() -> true when next() will give no more tokens (max_new_tokens reached, a stop token
 * produced, finish() called): the token just returned was the last. */
static int l_gen_ended(lua_State *L) {
    gen_ud *g = check_gen(L, 1);
    lua_pushboolean(L, g->done || g->ngen >= g->max_new);
    return 1;
}

static int l_gen_gc(lua_State *L) {
    gen_ud *g = check_gen(L, 1);
    seer_kv_cache_free(g->cache);
    g->cache = NULL;
    free(g->hist);
    g->hist = NULL;
    free(g->logits);
    g->logits = NULL;
    free(g->plogits);
    g->plogits = NULL;
    free(g->bres);
    g->bres = NULL;
    seer_hookset_free(g->hooks);
    g->hooks = NULL;
    if (g->model_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, g->model_ref);
    g->model_ref = LUA_NOREF;
    return 0;
}

/* hook_mask() -> the bit mask of the model's hook points (seer.core.hooks.names turns it into names). */
static int l_hook_mask(lua_State *L) {
    lua_pushnumber(L, (lua_Number)seer_model_hook_mask(check_model(L, 1)));
    return 1;
}

/* unembed(t) -> logits: t is [..., hidden_size] (any dtype); the result is [..., vocab] f32. */
static int l_unembed(lua_State *L) {
    seer_model_t *m = check_model(L, 1);
    seer_tensor_t *t = seer_tensor_check(L, 2);
    const seer_model_config_t *c = seer_model_config(m);
    char sh[96];
    if (t->ndim < 1 || t->shape[t->ndim - 1] != c->hidden_size)
        return luaL_error(L, "unembed: expected a [..., %d] residual-stream tensor, got %s", c->hidden_size,
                          seer_tensor_shape_str(t, sh, sizeof sh));
    seer_tensor_t *x = seer_tensor_to(t, SEER_F32);
    int64_t shape[SEER_TENSOR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[t->ndim - 1] = c->vocab_size;
    seer_tensor_t *out = x ? seer_tensor_new(SEER_F32, t->ndim, shape) : NULL;
    if (!out) {
        seer_tensor_release(x);
        return luaL_error(L, "unembed: out of memory");
    }
    int64_t rows = seer_tensor_numel(x) / c->hidden_size;
    seer_err_t err;
    int rc = rows > 0 ? seer_model_unembed(m, seer_tensor_data(x), (int)rows, seer_tensor_data(out), &err) : 0;
    seer_tensor_release(x);
    if (rc < 0) {
        seer_tensor_release(out);
        return luaL_error(L, "%s", err.msg);
    }
    seer_tensor_push(L, out);
    seer_tensor_release(out);
    return 1;
}

static void push_field(void *ud, const char *name, seer_field_kind_t kind, const char *ok, const char *bad,
                       const char *why) {
    lua_State *L = ud;
    lua_createtable(L, 0, 4);
    lua_pushstring(L, kind == SEER_FIELD_USED ? "used" : kind == SEER_FIELD_INERT ? "inert" : "refused");
    lua_setfield(L, -2, "kind");
    if (ok) lua_pushstring(L, ok), lua_setfield(L, -2, "ok");
    if (bad) lua_pushstring(L, bad), lua_setfield(L, -2, "bad");
    if (why) lua_pushstring(L, why), lua_setfield(L, -2, "why");
    lua_setfield(L, -2, name);
}

/* config_fields(model_type) -> {name = {kind = "used"|"inert"|"refused", ok?, bad?, why?}} or
 * nil for a model_type seer does not support. */
static int l_config_fields(lua_State *L) {
    const char *mt = luaL_checkstring(L, 1);
    lua_newtable(L);
    if (seer_model_config_fields(mt, push_field, L) < 0) lua_pushnil(L);
    return 1;
}

static int l_supported(lua_State *L) {
    lua_pushstring(L, seer_model_supported());
    return 1;
}

static const luaL_Reg model_methods[] = {
    {"config", l_config},
    {"device", l_device},
    {"forward", l_forward},
    {"forward_batch", l_forward_batch},
    {"generator", l_generator},
    {"hook_mask", l_hook_mask},
    {"unembed", l_unembed},
    {"load_adapter", seer_lora_l_load},
    {"set_adapter", seer_lora_l_set},
    {NULL, NULL},
};

static const luaL_Reg gen_methods[] = {
    {"next", l_gen_next},
    {"finish", l_gen_finish},
    {"ended", l_gen_ended},
    {"took_prompt", l_gen_took_prompt},
    {"prompt_logits", l_gen_prompt_logits},
    {"keep_prompt", l_gen_keep_prompt},
    {"prompt_fresh", l_gen_prompt_fresh},
    {NULL, NULL},
};

/* core.fast_kind() -> "AMX" | "AVX512_BF16" | nil, why: what precision = "fast" runs on this CPU;
 * with nil, a sentence saying why it computes what "exact" does. */
static int l_fast_kind(lua_State *L) {
    const char *why = NULL, *k = seer_k_fast_kind(&why);
    if (k) {
        lua_pushstring(L, k);
        return 1;
    }
    lua_pushnil(L);
    lua_pushstring(L, why ? why : "");
    return 2;
}

/* core.shared_prefills() -> how many generator prefills were served with another's whole prompt
 * (prompt_donor), how many prompt positions were taken as shared prefixes (prefix_donor), and
 * how many (position, block) pairs were taken as shared first blocks (block_donor: a prompt's
 * length times the blocks taken), since the process started: the tests and benches read them. */
static int l_shared_prefills(lua_State *L) {
    lua_pushnumber(L, (lua_Number)__atomic_load_n(&g_shared_prefills, __ATOMIC_RELAXED));
    lua_pushnumber(L, (lua_Number)__atomic_load_n(&g_shared_prefix_rows, __ATOMIC_RELAXED));
    lua_pushnumber(L, (lua_Number)__atomic_load_n(&g_shared_block_rows, __ATOMIC_RELAXED));
    return 3;
}

/* core.blas_row_period() -> the unit of the GEMM path's row tiles (seer_k_blas_row_period): 1
 * where seer's own GEMM runs (Intel CPUs with AVX-512: a row's bits never depend on the call),
 * else OpenBLAS's sgemm's as this process found it (0: none, or no OpenBLAS): a shared beginning
 * on the GEMM path covers only rows in whole tiles of both prompts' calls. For tests and
 * diagnostics. */
static int l_blas_row_period(lua_State *L) {
    lua_pushinteger(L, seer_k_blas_row_period());
    return 1;
}

/* core.gemm_min_tokens([n]) -> the previous override: n (16 or more) is the count from which a
 * sequence alone takes the GEMM path where the per-token kernel is the blocked one (both dtypes),
 * 0 this CPU's defaults, nil only reads (seer_k_gemm_min_override). For tests and tuning; a
 * loaded model's config.gemm_min_tokens keeps the value it was loaded with. */

static int l_gemm_min_tokens(lua_State *L) {
    int n = -1;
    if (!lua_isnoneornil(L, 1)) {
        lua_Number v = luaL_checknumber(L, 1);
        if (!(v == 0 || (v >= SEER_BLAS_MIN_TOKENS && v <= (1 << 30))) || v != (lua_Number)(int)v)
            return luaL_error(L, "gemm_min_tokens: n must be 0 (the defaults) or a whole number from %d to 2^30, got %s",
                              SEER_BLAS_MIN_TOKENS, lua_tostring(L, 1));
        n = (int)v;
    }
    lua_pushinteger(L, seer_k_gemm_min_override(n));
    return 1;
}

int seer_model_luaopen(lua_State *L) {
    if (luaL_newmetatable(L, MODEL_MT)) {
        lua_newtable(L);
        luaL_register(L, NULL, model_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_model_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, GEN_MT)) {
        lua_newtable(L);
        luaL_register(L, NULL, gen_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_gen_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, HOOKSETS_MT)) {
        lua_pushcfunction(L, l_hooksets_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, FWDKEEP_MT)) {
        lua_newtable(L);
        lua_pushcfunction(L, l_fwdkeep_info);
        lua_setfield(L, -2, "info");
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_fwdkeep_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_gen_step_batch);
    lua_setfield(L, -2, "step_batch");
    lua_pushcfunction(L, l_load);
    lua_setfield(L, -2, "load");
    lua_pushcfunction(L, l_devices);
    lua_setfield(L, -2, "devices");
    lua_pushcfunction(L, l_supported);
    lua_setfield(L, -2, "supported");
    lua_pushcfunction(L, l_config_fields);
    lua_setfield(L, -2, "config_fields");
    lua_pushcfunction(L, l_fast_kind);
    lua_setfield(L, -2, "fast_kind");
    lua_pushcfunction(L, l_gemm_min_tokens);
    lua_setfield(L, -2, "gemm_min_tokens");
    lua_pushcfunction(L, l_shared_prefills);
    lua_setfield(L, -2, "shared_prefills");
    lua_pushcfunction(L, l_blas_row_period);
    lua_setfield(L, -2, "blas_row_period");
    return 1;
}
