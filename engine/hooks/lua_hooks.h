/* The Lua side of engine/hooks, for other bindings (lua_model.c): interventions are userdata
 * of seer.core.hooks, and a forward call receives its hooks as a Lua list of {name, iv}. */
#ifndef SEER_LUA_HOOKS_H
#define SEER_LUA_HOOKS_H

#include "hooks.h"

typedef struct lua_State lua_State;

/* package.preload["seer.core.hooks"]. */
int seer_hooks_luaopen(lua_State *L);
/* The intervention of the userdata at idx, or NULL. */
seer_intervention_t *seer_hooks_lua_test(lua_State *L, int idx);
/* A hook set from the list {{name, iv}, ...} at idx (nil or empty: NULL). Names must be exact
 * hook names of a model with num_layers layers and the point mask; a Lua error otherwise. */
seer_hookset_t *seer_hooks_lua_build(lua_State *L, int idx, int num_layers, unsigned mask);

#endif
