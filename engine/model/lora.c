/* LoRA adapters (PEFT format) on a loaded model. Placeholder until the LoRA loader lands:
 * no weight ever carries an adapter yet, so this is never reached with one. */
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>

#include "model_private.h"

void seer_lora_apply(seer_pool_t *p, float *y, const float *x, int n, const struct seer_lora *lora) {
    (void)p, (void)y, (void)x, (void)n, (void)lora;
    fprintf(stderr, "seer: internal error: a LoRA adapter is attached but lora.c has no implementation\n");
    abort();
}

int seer_lora_l_load(lua_State *L) { return luaL_error(L, "load_adapter: LoRA adapters are not implemented yet"); }
int seer_lora_l_set(lua_State *L) { return luaL_error(L, "set_adapter: LoRA adapters are not implemented yet"); }
