/*
 * tests/fuzz/fuzz_key.c - codec_decode_key() on the path after "/locks/"
 * as a client sends it, and for every key it accepts, the list cursor of
 * that key (codec_cursor_encode) must decode back to the same bytes. The
 * raw cursor decoder gets the input too: it must accept only cursors of
 * valid keys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec.h"
#include "tests/fuzz/fuzz.h"

static void check_cursor_of(const char *key, size_t len)
{
    char cursor[API_CURSOR_MAX + 1];
    char back[LOCK_KEY_MAX + 1];
    size_t blen = 0;

    if (codec_cursor_encode(key, len, cursor, sizeof(cursor)) != 0)
        abort(); /* every key the codec accepts has a cursor */
    if (codec_cursor_decode(cursor, strlen(cursor), back, &blen) != 0 ||
        blen != len || memcmp(back, key, len) != 0)
        abort(); /* and it leads back to the key */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *raw = fuzz_strdup(data, size);
    char msg[256];
    char *key = NULL;
    size_t len = 0;
    char back[LOCK_KEY_MAX + 1];
    size_t blen = 0;

    msg[0] = '\0';
    if (codec_decode_key(raw, &key, &len, msg, sizeof(msg)) == API_OK) {
        if (key == NULL || len == 0 || len > LOCK_KEY_MAX ||
            memchr(key, '\0', len) != NULL || !backend_key_ok(key, len))
            abort(); /* the codec's contract: a valid key */
        check_cursor_of(key, len);
    } else if (key != NULL || memchr(msg, '\0', sizeof(msg)) == NULL) {
        abort(); /* an error leaves no key and a message */
    }
    free(key);
    /* the cursor decoder on the raw bytes: what it accepts is a key */
    if (codec_cursor_decode((const char *)data, size, back, &blen) == 0 &&
        (blen == 0 || blen > LOCK_KEY_MAX || !backend_key_ok(back, blen)))
        abort();
    free(raw);
    return 0;
}
