/*
 * lib/log.h - leveled logging to stderr or a file, as text or one JSON
 * object a line; the access log and lock events. Thread-safe: lines are
 * never torn, and once log_start() runs they come out in time order
 * whatever thread wrote them (see log.c).
 */
#ifndef LIB_LOG_H
#define LIB_LOG_H

#include <stddef.h>
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

/*
 * Which lock lifecycle events are written (--log-events), at level info:
 * AUDIT only forced releases (written whatever the level); CHANGES also
 * grants, releases, expiries, takeovers, lost holds and waiter timeouts;
 * ALL also renewals.
 */
enum log_events {
    LOG_EVENTS_AUDIT = 0,
    LOG_EVENTS_CHANGES,
    LOG_EVENTS_ALL,
};

/* Set before any thread starts; the defaults are info and text. */
void log_setup(enum log_level level, enum log_format format);
/* 0 and *out set, or -1 for an unknown name ("debug", "info", ...). */
int log_level_parse(const char *name, enum log_level *out);
int log_format_parse(const char *name, enum log_format *out);
/* "audit", "changes" or "all". */
int log_events_parse(const char *name, enum log_events *out);
int log_enabled(enum log_level level);

void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

/* Gather every line per thread and write them every 50 ms (sooner when a
 * buffer fills) from a flusher thread, merged in time order: 0, or -1
 * (lines are then written at once). log_stop() writes what is left; call
 * it once the other threads are gone, and on every way out. Without
 * log_start(), every line is written at once. */
int log_start(void);
void log_stop(void);

/* Write to path (appending; made 0644 if absent) instead of stderr. Call
 * before any thread logs. 0, or -1 with the reason in err (errlen bytes;
 * names the file). path is copied. */
int log_open_file(const char *path, char *err, size_t errlen);
/* The --log-file path, or NULL (stderr). */
const char *log_file_path(void);
/* Reopen the log file by its path (logrotate renamed it): the lines
 * stamped before the call are written to the old file first, the others
 * go to the new one, none lost or split. 0 (also when logging to stderr),
 * or -1 with the reason in err and the old file kept. Thread-safe. */
int log_reopen(char *err, size_t errlen);

/*
 * A named value on an event or access line: a string of len bytes (any
 * bytes: escaped for the format, cut at LOG_FIELD_MAX) when str is set,
 * else the number num. Fields with a NULL name are skipped, so optional
 * ones can sit in a fixed array.
 */
struct log_field {
    const char *name;
    const char *str;
    size_t len;
    int64_t num;
};
#define LOG_FIELD_MAX 600 /* bytes of one string value written */

/* One access line: method, path (as received, escaped for the format),
 * status, duration, request id (may be NULL), then the n extra fields
 * (fields may be NULL when n is 0): the client address, the owner, the
 * fence, ... */
void log_access(const char *method,
                const char *path,
                unsigned status,
                int64_t duration_us,
                const char *request_id,
                const struct log_field *fields,
                size_t n);

/*
 * One event of a lock's life ("lock.grant", "lock.expired", ...; the list
 * is in docs/operations.md) at level: JSON {"time","level","msg":"event",
 * "event":name, fields...}; text "<time> <level> event <name> k=v ...".
 * Buffered like access lines, in the same time order.
 */
void log_event(enum log_level level,
               const char *event,
               const struct log_field *fields,
               size_t n);
/* An audit event (a forced release): as log_event() at level warn, but
 * written whatever the --log-level. */
void log_audit(const char *event, const struct log_field *fields, size_t n);

#endif /* LIB_LOG_H */
