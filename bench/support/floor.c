/* The module API's floor for what RL.TOKEN does, measured beside it in make bench. rlfloor.openreply
 * (a denial): open the key for writing, read its type and value, reply an array of five integers,
 * close it. rlfloor.write (an allowed request): the same, plus writing 8 bytes in place (creating the
 * key when missing, with an expiry) and replicating the effect as SET key value KEEPTTL. No decision,
 * no statistics. Both take RL.TOKEN's arguments (`key capacity rate cost`, ignored after the key) and
 * declare its keys the same way (every fourth argument), so the server's work for the call (reading,
 * parsing and freeing the arguments, finding the keys) is the same as for RL.TOKEN. Loaded only by the
 * benchmark (built with the system C compiler). Reaches the module API through the pointer the server
 * puts first in the context, as redismodule.h does. */
#include <stddef.h>

#define OK 0
#define ERR 1
#define READ (1 << 0)
#define WRITE (1 << 1)
#define KEYTYPE_STRING 1

typedef int (*get_api_fn)(const char *name, void *out);
static void *(*open_key)(void *, void *, int);
static int (*key_type)(void *);
static char *(*string_dma)(void *, size_t *, int);
static void (*close_key)(void *);
static int (*reply_array)(void *, long);
static int (*reply_int)(void *, long long);
static int (*string_truncate)(void *, size_t);
static int (*set_expire)(void *, long long);
static int (*replicate)(void *, const char *, const char *, ...);

static int floor_command(void *ctx, void **argv, int argc) {
    if (argc < 2) return OK;
    void *key = open_key(ctx, argv[1], READ | WRITE);
    long long first = 0;
    if (key_type(key) == KEYTYPE_STRING) {
        size_t len = 0;
        char *value = string_dma(key, &len, READ);
        if (value && len) first = value[0];
    }
    reply_array(ctx, 5);
    reply_int(ctx, 0);
    reply_int(ctx, 10);
    reply_int(ctx, first);
    reply_int(ctx, 140);
    reply_int(ctx, 1999);
    close_key(key);
    return OK;
}

static int write_command(void *ctx, void **argv, int argc) {
    if (argc < 2) return OK;
    void *key = open_key(ctx, argv[1], READ | WRITE);
    int type = key_type(key);
    if (type != KEYTYPE_STRING) {
        string_truncate(key, 8);
        set_expire(key, 60000);
    }
    size_t len = 0;
    char *value = string_dma(key, &len, WRITE);
    if (value && len >= 8) value[0]++;
    if (value) replicate(ctx, "SET", "sbc", argv[1], value, len, "KEEPTTL");
    reply_array(ctx, 5);
    reply_int(ctx, 1);
    reply_int(ctx, 10);
    reply_int(ctx, 9);
    reply_int(ctx, 0);
    reply_int(ctx, 200);
    close_key(key);
    return OK;
}

int RedisModule_OnLoad(void *ctx, void **argv, int argc) {
    (void)argv;
    (void)argc;
    get_api_fn get_api = *(get_api_fn *)ctx;
    int (*set_attribs)(void *, const char *, int, int) = 0;
    int (*create_command)(void *, const char *, int (*)(void *, void **, int), const char *, int, int, int) = 0;
    if (get_api("RedisModule_SetModuleAttribs", &set_attribs) != OK) return ERR;
    set_attribs(ctx, "rlfloor", 1, 1);
    if (get_api("RedisModule_CreateCommand", &create_command) || get_api("RedisModule_OpenKey", &open_key) ||
        get_api("RedisModule_KeyType", &key_type) || get_api("RedisModule_StringDMA", &string_dma) ||
        get_api("RedisModule_CloseKey", &close_key) || get_api("RedisModule_ReplyWithArray", &reply_array) ||
        get_api("RedisModule_ReplyWithLongLong", &reply_int) || get_api("RedisModule_StringTruncate", &string_truncate) ||
        get_api("RedisModule_SetExpire", &set_expire) || get_api("RedisModule_Replicate", &replicate))
        return ERR;
    if (create_command(ctx, "rlfloor.openreply", floor_command, "write fast", 1, -1, 4) != OK) return ERR;
    return create_command(ctx, "rlfloor.write", write_command, "write deny-oom fast", 1, -1, 4);
}
