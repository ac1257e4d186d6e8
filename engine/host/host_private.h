/* Shared between the files of engine/host only. */
#ifndef SEER_HOST_PRIVATE_H
#define SEER_HOST_PRIVATE_H

#include "host.h"

int seer_host_corelib_open(lua_State *L);
void seer_host_corelib_configure(lua_State *L, const char *lua_dir, const char *progname);
void seer_host_add_script_dir(lua_State *L, const char *dir, const char *lua_dir);
void seer_host_interrupt_arm(lua_State *L);
void seer_host_interrupt_disarm(lua_State *L);

#endif
