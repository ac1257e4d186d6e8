/* Pieces shared by the GPT-2 and GPT-NeoX architectures (gpt2.c, gpt_neox.c): LayerNorm with
 * bias, the GELU family and a linear layer over weights stored [in][out] (GPT-2's Conv1D). */
#ifndef SEER_GPT_COMMON_H
#define SEER_GPT_COMMON_H

#include "model_private.h"

typedef enum { SEER_ACT_GELU_ERF = 0, SEER_ACT_GELU_TANH, SEER_ACT_RELU } seer_act_t;

/* Reads a string activation name from config.json (key; absent: dflt) into *act. Accepts gelu
 * (erf), gelu_new / gelu_pytorch_tanh / gelu_fast (tanh approximation) and relu. */
int seer_gpt_activation(const seer_model_t *m, const char *key, const char *dflt, seer_act_t *act, seer_err_t *err);
/* A boolean field of config.json, dflt when absent; an error when it is not a boolean. */
int seer_gpt_bool(const seer_model_t *m, const char *key, int dflt, int *out, seer_err_t *err);
void seer_gpt_act(float *x, size_t n, seer_act_t act);

/* y[n][d] = (x - mean) / sqrt(var + eps) * w + b (torch.nn.LayerNorm). y may alias x. */
void seer_gpt_layernorm(float *y, const float *x, int n, int d, const seer_weight_t *w, const seer_weight_t *b, float eps);

/* y[n][out] = x[n][in] . W[in][out] (+ bias[out]) for a weight stored transposed relative to
 * nn.Linear (transformers' Conv1D): w->rows = in, w->cols = out. Reads the mapped weight in
 * place (no transposed copy); columns are split across the pool. */
void seer_gpt_linear_t(seer_pool_t *p, float *y, const float *x, int n, const seer_weight_t *w, const seer_weight_t *bias);


#endif
