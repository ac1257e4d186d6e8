/* LoRA adapters in PEFT format (adapter_config.json + adapter_model.safetensors) on a loaded
 * model: merged into private f32 copies of the adapted weights, or kept separate and applied
 * by seer_lora_apply after each adapted linear layer (switchable per model). Private to
 * engine/model; docs/lora.md. */
#ifndef SEER_MODEL_LORA_H
#define SEER_MODEL_LORA_H

#include "model_private.h"

/* The largest rank accepted (the delta kernel keeps A.x of one token on the stack). */
#define SEER_LORA_MAX_RANK 1024

/* One adapted weight W [out][in], kept separate: y += scale * B . (A . x). */
struct seer_lora {
    int r;
    int64_t in, out;
    float scale;        /* lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora */
    float *A;           /* [r][in], f32 */
    float *B;           /* [out][r], f32: lora_B, for the prefill GEMM */
    float *BT;          /* [r][out], f32: lora_B transposed, so a decode step is r contiguous axpys */
    const int *enabled; /* the model's switch (set_adapter), shared by all its adapted weights */
};

/* Loads the adapter in dir onto m. merge: fold scale * B.A into private f32 copies of the
 * adapted weights (permanent for this model); else keep it separate, enabled. Validates the
 * whole adapter before changing the model: on error the model is as it was. Errors name the
 * file and the tensor or field. */
int seer_lora_load(seer_model_t *m, const char *dir, int merge, seer_err_t *err);
/* Switches the separately kept adapter on or off (an error when there is none). */
int seer_lora_set_enabled(seer_model_t *m, int enabled, seer_err_t *err);

#endif
