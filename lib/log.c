/*
 * lib/log.c - leveled logging to stderr, as text or JSON lines. Each
 * message is formatted into one buffer and written with one write(2), so
 * lines from different threads never interleave.
 */
#include "lib/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 4096

static enum log_level log_min = LOG_LEVEL_INFO;   /* frozen before threads */
static enum log_format log_fmt = LOG_FORMAT_TEXT; /* frozen before threads */

static const char *const level_names[] = { "debug", "info", "warn", "error" };

void log_setup(enum log_level level, enum log_format format)
{
    log_min = level;
    log_fmt = format;
}

int log_level_parse(const char *name, enum log_level *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

int log_format_parse(const char *name, enum log_format *out)
{
    if (strcmp(name, "text") == 0)
        *out = LOG_FORMAT_TEXT;
    else if (strcmp(name, "json") == 0)
        *out = LOG_FORMAT_JSON;
    else
        return -1;
    return 0;
}

int log_events_parse(const char *name, enum log_events *out)
{
    if (strcmp(name, "audit") == 0)
        *out = LOG_EVENTS_AUDIT;
    else if (strcmp(name, "changes") == 0)
        *out = LOG_EVENTS_CHANGES;
    else if (strcmp(name, "all") == 0)
        *out = LOG_EVENTS_ALL;
    else
        return -1;
    return 0;
}

int log_enabled(enum log_level level)
{
    return level >= log_min;
}

/* Append s to buf at *pos, JSON-escaped (json) or with control bytes
 * escaped (text), never past cap - 1. */
static void
put_escaped(char *buf, size_t cap, size_t *pos, const char *s, int json)
{
    for (; *s != '\0' && *pos + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (json && (c == '"' || c == '\\')) {
            buf[(*pos)++] = '\\';
            buf[(*pos)++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            *pos += (size_t)snprintf(buf + *pos, cap - *pos,
                                     json ? "\\u%04x" : "\\x%02x", c);
        } else {
            buf[(*pos)++] = (char)c;
        }
    }
    buf[*pos] = '\0';
}

static void put_raw(char *buf, size_t cap, size_t *pos, const char *s)
{
    int n = snprintf(buf + *pos, cap - *pos, "%s", s);
    if (n > 0)
        *pos += (size_t)n < cap - *pos ? (size_t)n : cap - *pos - 1;
}

/* The date part changes once a second: format it once per second per
 * thread (gmtime_r takes glibc's time zone lock). */
static _Thread_local time_t cached_sec = -1;
static _Thread_local char cached_date[40]; /* "YYYY-MM-DDTHH:MM:SS" */

static void put_time(char *buf, size_t cap, size_t *pos)
{
    struct timespec ts;
    char tmp[64];

    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != cached_sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        snprintf(cached_date, sizeof(cached_date),
                 "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        cached_sec = ts.tv_sec;
    }
    snprintf(tmp, sizeof(tmp), "%s.%03ldZ", cached_date, ts.tv_nsec / 1000000);
    put_raw(buf, cap, pos, tmp);
}

static void write_all(const char *buf, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = write(STDERR_FILENO, buf + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        off += (size_t)n;
    }
}

static void emit(char *buf, size_t pos)
{
    buf[pos++] = '\n';
    write_all(buf, pos);
}

/*
 * Access lines are the one log line of every request: each server thread
 * gathers them in its own buffer, written when it fills and by a flusher
 * thread every LOG_FLUSH_MS, so a busy server makes one write(2) per many
 * requests instead of one each. Other messages are written at once.
 */
#define LOG_BUF_SIZE 16384
#define LOG_FLUSH_MS 50

struct log_buf {
    pthread_mutex_t mu;   /* guards len and data */
    struct log_buf *next; /* in all_bufs, never removed until log_stop() */
    size_t len;
    char data[LOG_BUF_SIZE];
};

static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER; /* guards below */
static struct log_buf *all_bufs;
static bool flusher_on;
static bool flusher_stop;
static pthread_cond_t flusher_cv = PTHREAD_COND_INITIALIZER;
static pthread_t flusher;
static _Thread_local struct log_buf *my_buf;

static void buf_flush(struct log_buf *b)
{
    pthread_mutex_lock(&b->mu);
    if (b->len > 0)
        write_all(b->data, b->len);
    b->len = 0;
    pthread_mutex_unlock(&b->mu);
}

static void flush_all(void)
{
    for (struct log_buf *b = all_bufs; b != NULL; b = b->next)
        buf_flush(b);
}

static void *flusher_main(void *arg)
{
    struct timespec ts;

    (void)arg;
    pthread_mutex_lock(&all_mu);
    while (!flusher_stop) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += LOG_FLUSH_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&flusher_cv, &all_mu, &ts);
        flush_all();
    }
    pthread_mutex_unlock(&all_mu);
    return NULL;
}

/* Append one access line (newline included) to this thread's buffer; false
 * when lines are written at once (no flusher, or no memory). */
static bool buffer_line(const char *line, size_t len)
{
    struct log_buf *b = my_buf;

    if (b == NULL) {
        pthread_mutex_lock(&all_mu);
        if (flusher_on && (b = calloc(1, sizeof(*b))) != NULL) {
            pthread_mutex_init(&b->mu, NULL);
            b->next = all_bufs;
            all_bufs = b;
            my_buf = b;
        }
        pthread_mutex_unlock(&all_mu);
        if (b == NULL)
            return false;
    }
    pthread_mutex_lock(&b->mu);
    if (b->len + len > sizeof(b->data)) {
        write_all(b->data, b->len);
        b->len = 0;
    }
    memcpy(b->data + b->len, line, len);
    b->len += len;
    pthread_mutex_unlock(&b->mu);
    return true;
}

int log_start(void)
{
    int err;

    pthread_mutex_lock(&all_mu);
    flusher_stop = false;
    err = pthread_create(&flusher, NULL, flusher_main, NULL);
    flusher_on = err == 0;
    pthread_mutex_unlock(&all_mu);
    return err == 0 ? 0 : -1;
}

void log_stop(void)
{
    struct log_buf *b, *next;

    pthread_mutex_lock(&all_mu);
    if (!flusher_on) {
        pthread_mutex_unlock(&all_mu);
        return;
    }
    flusher_stop = true;
    flusher_on = false;
    pthread_cond_signal(&flusher_cv);
    pthread_mutex_unlock(&all_mu);
    pthread_join(flusher, NULL);
    pthread_mutex_lock(&all_mu);
    flush_all();
    for (b = all_bufs; b != NULL; b = next) {
        next = b->next;
        pthread_mutex_destroy(&b->mu);
        free(b);
    }
    all_bufs = NULL;
    pthread_mutex_unlock(&all_mu);
    my_buf = NULL; /* other threads have ended: the server is stopped */
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char msg[LOG_LINE_MAX];
    char line[LOG_LINE_MAX * 2];
    size_t pos = 0;
    va_list ap;
    int json = log_fmt == LOG_FORMAT_JSON;

    if (level < log_min)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap); /* truncation is acceptable */
    va_end(ap);
    if (json) {
        put_raw(line, sizeof(line) - 1, &pos, "{\"time\":\"");
        put_time(line, sizeof(line) - 1, &pos);
        put_raw(line, sizeof(line) - 1, &pos, "\",\"level\":\"");
        put_raw(line, sizeof(line) - 1, &pos, level_names[level]);
        put_raw(line, sizeof(line) - 1, &pos, "\",\"msg\":\"");
        put_escaped(line, sizeof(line) - 3, &pos, msg, 1);
        put_raw(line, sizeof(line) - 1, &pos, "\"}");
    } else {
        put_time(line, sizeof(line) - 1, &pos);
        put_raw(line, sizeof(line) - 1, &pos, " ");
        put_raw(line, sizeof(line) - 1, &pos, level_names[level]);
        put_raw(line, sizeof(line) - 1, &pos, " ");
        put_escaped(line, sizeof(line) - 1, &pos, msg, 0);
    }
    emit(line, pos);
}

/* Append one field, ` name=value` (text) or `,"name":value` (JSON). */
static void put_field(
    char *buf, size_t cap, size_t *pos, const struct log_field *f, int json)
{
    char tmp[LOG_FIELD_MAX + 1];
    char num[32];

    if (f->name == NULL || *pos + 64 >= cap)
        return;
    put_raw(buf, cap, pos, json ? ",\"" : " ");
    put_escaped(buf, cap - 32, pos, f->name, json);
    put_raw(buf, cap, pos, json ? "\":" : "=");
    if (f->str == NULL) {
        snprintf(num, sizeof(num), "%lld", (long long)f->num);
        put_raw(buf, cap, pos, num);
        return;
    }
    size_t n = f->len < LOG_FIELD_MAX ? f->len : LOG_FIELD_MAX;
    memcpy(tmp, f->str, n);
    tmp[n] = '\0';
    for (size_t i = 0; i < n; i++) /* a NUL inside would end the value */
        if (tmp[i] == '\0')
            tmp[i] = '?';
    put_raw(buf, cap, pos, "\"");
    put_escaped(buf, cap - 8, pos, tmp, json);
    put_raw(buf, cap, pos, "\"");
}

static void put_fields(char *buf,
                       size_t cap,
                       size_t *pos,
                       const struct log_field *fields,
                       size_t n,
                       int json)
{
    for (size_t i = 0; i < n; i++)
        put_field(buf, cap, pos, &fields[i], json);
}

/* Hand a finished line (newline added here) to the buffers, or write it. */
static void emit_buffered(char *line, size_t pos)
{
    line[pos++] = '\n';
    if (!buffer_line(line, pos))
        write_all(line, pos);
}

void log_access(const char *method,
                const char *path,
                unsigned status,
                int64_t duration_us,
                const char *request_id,
                const struct log_field *fields,
                size_t n)
{
    char line[LOG_LINE_MAX * 2];
    char num[64];
    size_t pos = 0;
    size_t cap = sizeof(line) - 2;
    int json = log_fmt == LOG_FORMAT_JSON;

    if (LOG_LEVEL_INFO < log_min)
        return;
    if (json) {
        put_raw(line, cap, &pos, "{\"time\":\"");
        put_time(line, cap, &pos);
        put_raw(line, cap, &pos,
                "\",\"level\":\"info\",\"msg\":\"access\","
                "\"method\":\"");
        put_escaped(line, cap - 200, &pos, method, 1);
        put_raw(line, cap, &pos, "\",\"path\":\"");
        put_escaped(line, cap - 200, &pos, path, 1);
        snprintf(num, sizeof(num), "\",\"status\":%u,\"duration_ms\":%.3f",
                 status, (double)duration_us / 1000.0);
        put_raw(line, cap, &pos, num);
        if (request_id != NULL) {
            put_raw(line, cap, &pos, ",\"request_id\":\"");
            put_escaped(line, cap - 4, &pos, request_id, 1);
            put_raw(line, cap, &pos, "\"");
        }
        put_fields(line, cap - 2, &pos, fields, n, 1);
        put_raw(line, cap, &pos, "}");
    } else {
        put_time(line, cap, &pos);
        put_raw(line, cap, &pos, " info access ");
        put_escaped(line, cap - 200, &pos, method, 0);
        put_raw(line, cap, &pos, " ");
        put_escaped(line, cap - 200, &pos, path, 0);
        snprintf(num, sizeof(num), " %u %.3fms", status,
                 (double)duration_us / 1000.0);
        put_raw(line, cap, &pos, num);
        if (request_id != NULL) {
            put_raw(line, cap, &pos, " request_id=");
            put_escaped(line, cap, &pos, request_id, 0);
        }
        put_fields(line, cap, &pos, fields, n, 0);
    }
    emit_buffered(line, pos);
}

static void event_line(enum log_level level,
                       const char *event,
                       const struct log_field *fields,
                       size_t n);

void log_event(enum log_level level,
               const char *event,
               const struct log_field *fields,
               size_t n)
{
    if (level >= log_min)
        event_line(level, event, fields, n);
}

void log_audit(const char *event, const struct log_field *fields, size_t n)
{
    event_line(LOG_LEVEL_WARN, event, fields, n);
}

static void event_line(enum log_level level,
                       const char *event,
                       const struct log_field *fields,
                       size_t n)
{
    char line[LOG_LINE_MAX * 2];
    size_t pos = 0;
    size_t cap = sizeof(line) - 2;
    int json = log_fmt == LOG_FORMAT_JSON;

    if (json) {
        put_raw(line, cap, &pos, "{\"time\":\"");
        put_time(line, cap, &pos);
        put_raw(line, cap, &pos, "\",\"level\":\"");
        put_raw(line, cap, &pos, level_names[level]);
        put_raw(line, cap, &pos, "\",\"msg\":\"event\",\"event\":\"");
        put_escaped(line, cap - 64, &pos, event, 1);
        put_raw(line, cap, &pos, "\"");
        put_fields(line, cap - 2, &pos, fields, n, 1);
        put_raw(line, cap, &pos, "}");
    } else {
        put_time(line, cap, &pos);
        put_raw(line, cap, &pos, " ");
        put_raw(line, cap, &pos, level_names[level]);
        put_raw(line, cap, &pos, " event ");
        put_escaped(line, cap - 64, &pos, event, 0);
        put_fields(line, cap, &pos, fields, n, 0);
    }
    emit_buffered(line, pos);
}
