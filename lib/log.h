/*
 * lib/log.h - leveled logging to stderr, as text or one JSON object a
 * line; the access log. Thread-safe: each message is one write(2).
 */
#ifndef LIB_LOG_H
#define LIB_LOG_H

#include <stdint.h>

enum log_level {
    LOG_LEVEL_DEBUG = 0,
    LOG_LEVEL_INFO,
    LOG_LEVEL_WARN,
    LOG_LEVEL_ERROR,
};

enum log_format {
    LOG_FORMAT_TEXT = 0,
    LOG_FORMAT_JSON,
};

/* Set before any thread starts; the defaults are info and text. */
void log_setup(enum log_level level, enum log_format format);
/* 0 and *out set, or -1 for an unknown name ("debug", "info", ...). */
int log_level_parse(const char *name, enum log_level *out);
int log_format_parse(const char *name, enum log_format *out);
int log_enabled(enum log_level level);

void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

/* Gather access lines per thread and write them every 50 ms (or when a
 * buffer fills) from a flusher thread: 0, or -1 (lines are then written at
 * once). log_stop() writes what is left; call it once the server threads
 * are gone. Without log_start(), every line is written at once. */
int log_start(void);
void log_stop(void);

/* One access line: method, path (as received, escaped for the format),
 * status, duration, request id (may be NULL). */
void log_access(const char *method,
                const char *path,
                unsigned status,
                int64_t duration_us,
                const char *request_id);

#endif /* LIB_LOG_H */
