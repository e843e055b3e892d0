/* A test-only Redis module that takes the ACL category named by its first argument (default
 * "ratelimit") before the ratelimit module loads, as a server with the core GCRA command does with its
 * built-in @ratelimit. Self-contained: it reaches the module API through the pointer the server puts
 * first in the context, as redismodule.h's RedisModule_Init does. On a server without module ACL
 * categories (Redis 7.0) it loads and takes nothing. */
#include <string.h>

#define OK 0
#define ERR 1
typedef int (*get_api_fn)(const char *name, void *out);

int RedisModule_OnLoad(void *ctx, void **argv, int argc) {
    get_api_fn get_api = *(get_api_fn *)ctx;
    int (*set_attribs)(void *, const char *, int, int) = 0;
    int (*add_category)(void *, const char *) = 0;
    const char *(*string_ptr)(void *, size_t *) = 0;
    if (get_api("RedisModule_SetModuleAttribs", &set_attribs) != OK) return ERR;
    set_attribs(ctx, "aclclash", 1, 1);
    if (get_api("RedisModule_AddACLCategory", &add_category) != OK) return OK;
    const char *name = "ratelimit";
    if (argc > 0 && get_api("RedisModule_StringPtrLen", &string_ptr) == OK) name = string_ptr(argv[0], 0);
    return add_category(ctx, name);
}
