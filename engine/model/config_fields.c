/* Every config.json field of a supported architecture, classified: used by seer, inert (it
 * cannot change an eval-mode forward pass: dropout, labels, bookkeeping), or refused unless it
 * has a value seer implements. A field that changes the numerics is never ignored in silence:
 * it is implemented, or the load fails naming it. Fields seer does not know at all are listed
 * in a one-line note on stderr at load. tests/lua/test_model_config_fields.lua checks the
 * tables against the attributes of transformers' config classes (tests/parity/config_fields.json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "model_private.h"

/* ok: the accepted values as JSON text, '|'-separated (an absent field is always accepted);
 * bad: one value that is refused (for the test); why: said when refusing. */
typedef struct {
    const char *name;
    seer_field_kind_t kind;
    const char *ok, *bad, *why;
} field_t;

#define USED(n) {n, SEER_FIELD_USED, NULL, NULL, NULL}
#define INERT(n) {n, SEER_FIELD_INERT, NULL, NULL, NULL}
#define REFUSE(n, ok, bad, why) {n, SEER_FIELD_REFUSED, ok, bad, why}

/* PretrainedConfig's own fields (transformers 4 and 5) and what every decoder here shares. */
static const field_t common[] = {
    USED("model_type"), USED("tie_word_embeddings"), USED("bos_token_id"), USED("eos_token_id"),
    USED("vocab_size"), USED("hidden_size"), USED("intermediate_size"), USED("num_hidden_layers"),
    USED("num_attention_heads"), USED("max_position_embeddings"), USED("rope_theta"), USED("rope_scaling"),
    USED("rope_parameters"),
    INERT("pad_token_id"), INERT("sep_token_id"), INERT("decoder_start_token_id"),
    INERT("_name_or_path"), INERT("name_or_path"), INERT("architectures"), INERT("transformers_version"),
    INERT("dtype"), INERT("torch_dtype"), INERT("use_bfloat16"), INERT("_attn_implementation"),
    INERT("_attn_implementation_internal"), INERT("_attn_implementation_autoset"),
    INERT("_experts_implementation_internal"), INERT("_output_attentions"), INERT("_post_init_done"),
    INERT("_commit_hash"), INERT("output_attentions"), INERT("output_hidden_states"), INERT("return_dict"),
    INERT("torchscript"), INERT("tf_legacy_loss"), INERT("pruned_heads"), INERT("problem_type"),
    INERT("id2label"), INERT("label2id"), INERT("num_labels"), INERT("finetuning_task"), INERT("tokenizer_class"),
    INERT("prefix"), INERT("task_specific_params"), INERT("initializer_range"), INERT("use_cache"),
    /* chunking the feed-forward pass computes the same rows */
    INERT("chunk_size_feed_forward"),
    /* eval mode: dropout is the identity */
    INERT("attention_dropout"),
    /* generation defaults that transformers 4 wrote into config.json: generate's options and
     * generation_config.json decide sampling; none changes a forward pass */
    INERT("max_length"), INERT("min_length"), INERT("do_sample"), INERT("early_stopping"), INERT("num_beams"),
    INERT("num_beam_groups"), INERT("diversity_penalty"), INERT("temperature"), INERT("top_k"), INERT("top_p"),
    INERT("typical_p"), INERT("repetition_penalty"), INERT("length_penalty"), INERT("no_repeat_ngram_size"),
    INERT("encoder_no_repeat_ngram_size"), INERT("bad_words_ids"), INERT("num_return_sequences"),
    INERT("output_scores"), INERT("return_dict_in_generate"), INERT("forced_bos_token_id"),
    INERT("forced_eos_token_id"), INERT("remove_invalid_values"), INERT("exponential_decay_length_penalty"),
    INERT("suppress_tokens"), INERT("begin_suppress_tokens"),
    REFUSE("is_encoder_decoder", "false", "true", "seer runs decoder-only language models"),
    REFUSE("add_cross_attention", "false", "true", "cross-attention layers are not implemented"),
    INERT("cross_attention_hidden_size"), INERT("tie_encoder_decoder"), INERT("is_decoder"),
    REFUSE("quantization_config", "null", "{\"quant_method\":\"gptq\"}",
           "quantized checkpoints are not supported; use an F32/BF16/F16 checkpoint"),
};

/* The Llama-family decoder (llama.c). hidden_act: only SiLU is implemented (SwiGLU). */
#define LLAMA_COMMON                                                                                   \
    USED("num_key_value_heads"), USED("head_dim"), USED("rms_norm_eps"),                               \
        REFUSE("hidden_act", "\"silu\"|\"swish\"", "\"gelu\"", "the Llama-family MLP is implemented with SiLU only")

static const field_t llama[] = {
    LLAMA_COMMON, USED("attention_bias"), USED("mlp_bias"),
    /* transformers no longer reads it; the split matmul it once chose computed the same product */
    INERT("pretraining_tp"),
};
static const field_t mistral[] = {LLAMA_COMMON, USED("sliding_window")};
static const field_t qwen2[] = {LLAMA_COMMON, USED("sliding_window"), USED("use_sliding_window"),
                                USED("max_window_layers"), USED("layer_types")};
static const field_t qwen3[] = {LLAMA_COMMON,          USED("attention_bias"),    USED("sliding_window"),
                                USED("use_sliding_window"), USED("max_window_layers"), USED("layer_types")};

static const field_t granite[] = {
    LLAMA_COMMON, USED("attention_bias"), USED("mlp_bias"), USED("embedding_multiplier"), USED("residual_multiplier"),
    USED("attention_multiplier"), USED("logits_scaling"),
};

static const field_t olmo2[] = {LLAMA_COMMON, USED("attention_bias")};
static const field_t phi3[] = {
    LLAMA_COMMON, USED("sliding_window"), USED("partial_rotary_factor"), USED("original_max_position_embeddings"),
    INERT("embd_pdrop"), INERT("resid_pdrop"),
};

#define GEMMA_COMMON                                                                                           \
    USED("num_key_value_heads"), USED("head_dim"), USED("rms_norm_eps"), USED("attention_bias"),               \
        REFUSE("use_bidirectional_attention", "false|null", "true",                                            \
               "bidirectional attention (an encoder such as EmbeddingGemma) is not supported")

static const field_t gemma[] = {GEMMA_COMMON, USED("hidden_act"), USED("hidden_activation")};
static const field_t gemma2[] = {GEMMA_COMMON,          USED("hidden_activation"),       USED("hidden_act"),
                                 USED("query_pre_attn_scalar"), USED("attn_logit_softcapping"),
                                 USED("final_logit_softcapping"), USED("sliding_window"), USED("layer_types"),
                                 USED("cache_implementation")};
static const field_t gemma3_text[] = {
    GEMMA_COMMON, USED("hidden_activation"), USED("hidden_act"), USED("query_pre_attn_scalar"),
    /* read and checked, but not applied, exactly as transformers' Gemma3Attention */
    USED("attn_logit_softcapping"), USED("final_logit_softcapping"), USED("sliding_window"), USED("layer_types"),
    USED("sliding_window_pattern"), USED("_sliding_window_pattern"), USED("rope_local_base_freq"),
    INERT("cache_implementation"),
};
/* The fields a Gemma 3 multimodal config (model_type gemma3) adds around its text_config. */
static const field_t gemma3_mm[] = {
    USED("text_config"),
    INERT("vision_config"),        /* the vision tower is skipped (a note says so) */
    INERT("mm_tokens_per_image"),  /* image tokens: only the vision path makes them */
    INERT("boi_token_index"), INERT("eoi_token_index"), INERT("image_token_index"), INERT("image_token_id"),
    INERT("boi_token_id"), INERT("eoi_token_id"),
};
static const field_t gpt2[] = {
    USED("n_embd"), USED("n_head"), USED("n_layer"), USED("n_positions"), USED("n_inner"), USED("n_ctx"),
    USED("layer_norm_epsilon"), USED("activation_function"), USED("scale_attn_weights"),
    USED("scale_attn_by_inverse_layer_idx"),
    /* fp32: upcasting is the identity, and folding the scale into the matmul changes rounding only */
    INERT("reorder_and_upcast_attn"),
    INERT("attn_pdrop"), INERT("embd_pdrop"), INERT("resid_pdrop"),
    /* the sequence-summary head of GPT2DoubleHeadsModel, not part of the language model */
    INERT("summary_activation"), INERT("summary_first_dropout"), INERT("summary_proj_to_labels"),
    INERT("summary_type"), INERT("summary_use_proj"),
};
static const field_t gpt_neox[] = {
    USED("num_key_value_heads"), USED("attention_bias"), USED("hidden_act"), USED("layer_norm_eps"),
    USED("use_parallel_residual"), USED("rotary_pct"), USED("rotary_emb_base"), USED("partial_rotary_factor"),
    INERT("classifier_dropout"), INERT("hidden_dropout"),
};

typedef struct {
    const char *model_type;
    const field_t *f;
    size_t n;
} table_t;
#define T(mt, arr) {mt, arr, sizeof arr / sizeof arr[0]}
static const table_t tables[] = {
    T("llama", llama), T("mistral", mistral), T("qwen2", qwen2),   T("qwen3", qwen3),       T("gemma", gemma),
    T("gemma2", gemma2), T("gemma3_text", gemma3_text), T("gpt2", gpt2), T("gpt_neox", gpt_neox),
    T("granite", granite), T("olmo2", olmo2), T("phi3", phi3),
};

static const table_t *table_of(const char *model_type) {
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (strcmp(tables[i].model_type, model_type) == 0) return &tables[i];
    return NULL;
}

static const field_t *find_in(const field_t *f, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].name, name) == 0) return &f[i];
    return NULL;
}

/* The field's entry for model_type (multimodal: a Gemma 3 multimodal config's extras too). */
static const field_t *lookup(const char *model_type, int multimodal, const char *name) {
    const table_t *t = table_of(model_type);
    const field_t *f = t ? find_in(t->f, t->n, name) : NULL;
    if (!f && multimodal) f = find_in(gemma3_mm, sizeof gemma3_mm / sizeof gemma3_mm[0], name);
    if (!f) f = find_in(common, sizeof common / sizeof common[0], name);
    return f;
}

/* Is v's JSON text one of ok's '|'-separated alternatives? */
static int accepted(const cJSON *v, const char *ok) {
    char *text = cJSON_PrintUnformatted(v);
    if (!text) return 0;
    size_t tl = strlen(text);
    int yes = 0;
    for (const char *p = ok; *p && !yes;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        yes = l == tl && memcmp(p, text, l) == 0;
        p += l + (bar != NULL);
    }
    free(text);
    return yes;
}

int seer_model_check_fields(seer_model_t *m, int multimodal, seer_err_t *err) {
    const char *mt = m->cfg.model_type;
    char unknown[512] = "";
    size_t ul = 0;
    int nunknown = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, m->config_json) {
        const field_t *f = lookup(mt, multimodal, e->string);
        if (!f) {
            if (ul + strlen(e->string) + 8 < sizeof unknown)
                ul += (size_t)snprintf(unknown + ul, sizeof unknown - ul, "%s%s", nunknown ? ", " : "", e->string);
            nunknown++;
            continue;
        }
        if (f->kind == SEER_FIELD_REFUSED && !cJSON_IsNull(e) && !accepted(e, f->ok)) {
            char *text = cJSON_PrintUnformatted(e);
            int rc = seer_err_set(err, SEER_EPARSE, "%s/config.json: \"%s\": %.80s is not supported: %s (seer implements %s)",
                                  m->dir, f->name, text ? text : "?", f->why, f->ok);
            free(text);
            return rc;
        }
    }
    /* Not an error: a newer transformers may add fields; but never silent. */
    if (nunknown)
        fprintf(stderr, "seer: config.json of this %s model has %d field%s seer does not know, ignored: %s%s\n", mt,
                nunknown, nunknown == 1 ? "" : "s", unknown, ul + 8 >= sizeof unknown ? ", ..." : "");
    return 0;
}

int seer_model_config_fields(const char *model_type, seer_field_visit_fn fn, void *ud) {
    int multimodal = strcmp(model_type, "gemma3") == 0;
    const table_t *t = table_of(multimodal ? "gemma3_text" : model_type);
    if (!t) return -1;
    for (size_t i = 0; i < t->n; i++) fn(ud, t->f[i].name, t->f[i].kind, t->f[i].ok, t->f[i].bad, t->f[i].why);
    if (multimodal)
        for (size_t i = 0; i < sizeof gemma3_mm / sizeof gemma3_mm[0]; i++)
            fn(ud, gemma3_mm[i].name, gemma3_mm[i].kind, gemma3_mm[i].ok, gemma3_mm[i].bad, gemma3_mm[i].why);
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        if (!find_in(t->f, t->n, common[i].name))
            fn(ud, common[i].name, common[i].kind, common[i].ok, common[i].bad, common[i].why);
    return 0;
}
