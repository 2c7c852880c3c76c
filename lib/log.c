/*
 * lib/log.c - leveled logging to stderr or --log-file, as text or JSON
 * lines. Each line is formatted whole, stamped and buffered per thread; a
 * flusher thread merges the buffers by time and writes many lines per
 * write(2), so lines never interleave and come out in time order.
 */
#include "lib/log.h"
#include "lib/logfmt.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
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

/* The date part changes once a second: format it once per second per
 * thread (gmtime_r takes glibc's time zone lock). */
static _Thread_local time_t cached_sec = -1;
static _Thread_local char cached_date[40]; /* "YYYY-MM-DDTHH:MM:SS" */

#define LOG_TIME_LEN 24 /* "YYYY-MM-DDTHH:MM:SS.mmmZ" */

/* ts as LOG_TIME_LEN bytes at out (no NUL). */
static void format_time(char *out, const struct timespec *ts)
{
    char tmp[64];

    if (ts->tv_sec != cached_sec) {
        struct tm tm;
        gmtime_r(&ts->tv_sec, &tm);
        snprintf(cached_date, sizeof(cached_date),
                 "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        cached_sec = ts->tv_sec;
    }
    long ms = ts->tv_nsec / 1000000;
    size_t n = strlen(cached_date);
    memcpy(tmp, cached_date, n); /* as "%s.%03ldZ" */
    tmp[n] = '.';
    tmp[n + 1] = (char)('0' + ms / 100);
    tmp[n + 2] = (char)('0' + ms / 10 % 10);
    tmp[n + 3] = (char)('0' + ms % 10);
    tmp[n + 4] = 'Z';
    memcpy(out, tmp, LOG_TIME_LEN); /* years 1000-9999: always 24 */
}

/* Leave LOG_TIME_LEN bytes for the time at *pos: it is stamped when the
 * line is handed over (emit()), under the lock that orders it. */
static void put_time(char *buf, size_t cap, size_t *pos, size_t *slot)
{
    *slot = *pos;
    logfmt_put_raw(buf, cap, pos, "0000-00-00T00:00:00.000Z");
}

static int log_fd = STDERR_FILENO; /* --log-file: dup2()ed over on reopen */

static void write_all(const char *buf, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = write(log_fd, buf + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        off += (size_t)n;
    }
}

/*
 * Every line (messages, access lines, events) goes through the writing
 * thread's own buffer, stamped under that buffer's lock, and a flusher
 * thread writes them every LOG_FLUSH_MS (sooner when a buffer passes
 * LOG_BUF_KICK), so a busy server makes one write(2) per many lines and
 * the lines of all threads come out in time order:
 *
 * a round picks a cut time C, then swaps each buffer for an empty one in
 * turn; the lines stamped before C are merged by time and written, later
 * ones (stamped while the swaps went on, so that some of their peers may
 * sit in buffers swapped earlier) are held back for the next round. A line
 * stamped before C was in its buffer before that buffer's swap, since it
 * was stamped under the lock the swap takes: no line stamped after it can
 * be written before it.
 */
#define LOG_BUF_SIZE 16384   /* a buffer's first size */
#define LOG_BUF_KICK 65536   /* wake the flusher past this */
#define LOG_BUF_MAX  1048576 /* then the writer waits for a round */
#define LOG_FLUSH_MS 50
#define LOG_OUT_SIZE 65536 /* bytes per write(2), about */
#define LOG_WAIT_MS  200   /* a writer waits for a round at most this */

/* A line in a buffer: this header (memcpy'd: any alignment), then len
 * bytes, its newline included. */
struct log_rec {
    int64_t t_ns; /* CLOCK_REALTIME, as the printed time */
    uint32_t len;
};

struct log_buf {
    pthread_mutex_t mu;   /* guards data, len and cap */
    struct log_buf *next; /* in all_bufs, never removed until log_stop() */
    char *data;           /* owned: records */
    size_t len, cap;
    char *out; /* owned, the flusher's: the records swapped out */
    size_t out_len, out_cap;
};

/* A record of a round, sorted by (t_ns, src, p). */
struct log_ent {
    int64_t t_ns;
    size_t src; /* 0: held back from the last round; i + 1: i-th buffer */
    const char *p;
    uint32_t len;
};

static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER; /* guards below */
static struct log_buf *all_bufs;
static bool flusher_on;
static bool flusher_stop;
static pthread_cond_t flusher_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t round_cv = PTHREAD_COND_INITIALIZER; /* round ended */
static uint64_t rounds;
static pthread_t flusher;
static char *carry, *carry_next; /* records held back */
static size_t carry_len, carry_cap, carry_next_len, carry_next_cap;
static struct log_ent *ents; /* the round's index */
static size_t ents_cap;
static char out_buf[LOG_OUT_SIZE];
static size_t out_len;
static _Atomic bool kicked; /* a buffer is past LOG_BUF_KICK */
static _Thread_local struct log_buf *my_buf;
/* orders the lines written at once (no flusher) */
static pthread_mutex_t direct_mu = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* Append a record to *data (growing it up to max bytes): 0, or -1. */
static int rec_append(char **data,
                      size_t *len,
                      size_t *cap,
                      size_t max,
                      int64_t t_ns,
                      const char *line,
                      size_t n)
{
    struct log_rec h = { .t_ns = t_ns, .len = (uint32_t)n };
    size_t need = *len + sizeof(h) + n;

    if (need > *cap) {
        size_t ncap = *cap > 0 ? *cap : LOG_BUF_SIZE;
        char *p;
        while (ncap < need)
            ncap *= 2;
        if (ncap > max)
            return -1;
        p = realloc(*data, ncap);
        if (p == NULL)
            return -1;
        *data = p;
        *cap = ncap;
    }
    memcpy(*data + *len, &h, sizeof(h));
    memcpy(*data + *len + sizeof(h), line, n);
    *len = need;
    return 0;
}

/* Index every record of data[0..len) as source src: 0, or -1 out of
 * memory. */
static int index_recs(const char *data, size_t len, size_t src, size_t *n)
{
    for (size_t off = 0; off < len;) {
        struct log_rec h;
        memcpy(&h, data + off, sizeof(h));
        if (*n == ents_cap) {
            size_t ncap = ents_cap > 0 ? ents_cap * 2 : 1024;
            struct log_ent *e = realloc(ents, ncap * sizeof(*e));
            if (e == NULL)
                return -1;
            ents = e;
            ents_cap = ncap;
        }
        ents[(*n)++] = (struct log_ent){ .t_ns = h.t_ns,
                                         .src = src,
                                         .p = data + off + sizeof(h),
                                         .len = h.len };
        off += sizeof(h) + h.len;
    }
    return 0;
}

static int ent_cmp(const void *a, const void *b)
{
    const struct log_ent *x = a, *y = b;

    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    return x->p < y->p ? -1 : x->p > y->p; /* one buffer: its order */
}

static void out_put(const char *p, size_t n)
{
    if (out_len + n > sizeof(out_buf)) {
        write_all(out_buf, out_len);
        out_len = 0;
    }
    memcpy(out_buf + out_len, p, n); /* n < LOG_LINE_MAX * 2 */
    out_len += n;
}

/* Take every buffer's records, swapping in its (empty) spare. */
static void swap_all(void)
{
    for (struct log_buf *b = all_bufs; b != NULL; b = b->next) {
        char *d;
        size_t c;
        pthread_mutex_lock(&b->mu);
        d = b->data;
        c = b->cap;
        b->out_len = b->len;
        b->data = b->out;
        b->cap = b->out_cap;
        b->len = 0;
        b->out = d;
        b->out_cap = c;
        pthread_mutex_unlock(&b->mu);
    }
}

/* Out of memory for the index: write every record, source by source (no
 * line lost; maybe out of order). */
static void put_unsorted(void)
{
    const char *d = carry;
    size_t len = carry_len;

    for (struct log_buf *b = all_bufs;; b = b->next) {
        for (size_t off = 0; off < len;) {
            struct log_rec h;
            memcpy(&h, d + off, sizeof(h));
            out_put(d + off + sizeof(h), h.len);
            off += sizeof(h) + h.len;
        }
        if (b == NULL)
            break;
        d = b->out;
        len = b->out_len;
    }
    carry_next_len = 0;
}

/* One round, all_mu held: write the lines stamped before cut in time
 * order, hold back the others. */
static void flush_round(int64_t cut)
{
    size_t n = 0, src = 1;
    bool indexed;
    char *d;
    size_t c;

    swap_all();
    indexed = index_recs(carry, carry_len, 0, &n) == 0;
    for (struct log_buf *b = all_bufs; b != NULL && indexed; b = b->next)
        indexed = index_recs(b->out, b->out_len, src++, &n) == 0;
    carry_next_len = 0;
    if (indexed) {
        if (n > 0) /* ents is NULL until a round has lines */
            qsort(ents, n, sizeof(*ents), ent_cmp);
        for (size_t i = 0; i < n; i++)
            if (ents[i].t_ns < cut ||
                rec_append(&carry_next, &carry_next_len, &carry_next_cap,
                           SIZE_MAX, ents[i].t_ns, ents[i].p, ents[i].len) != 0)
                out_put(ents[i].p, ents[i].len);
    } else {
        put_unsorted();
    }
    write_all(out_buf, out_len);
    out_len = 0;
    for (struct log_buf *b = all_bufs; b != NULL; b = b->next)
        b->out_len = 0;
    d = carry; /* the held-back lines: next round's source 0 */
    c = carry_cap;
    carry = carry_next;
    carry_cap = carry_next_cap;
    carry_len = carry_next_len;
    carry_next = d;
    carry_next_cap = c;
    carry_next_len = 0;
    rounds++;
    pthread_cond_broadcast(&round_cv);
}

static void *flusher_main(void *arg)
{
    struct timespec ts;

    (void)arg;
    pthread_mutex_lock(&all_mu);
    while (!flusher_stop) {
        if (!atomic_exchange(&kicked, false)) {
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += LOG_FLUSH_MS * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&flusher_cv, &all_mu, &ts);
        }
        flush_round(now_ns(&ts));
    }
    pthread_mutex_unlock(&all_mu);
    return NULL;
}

/* This thread's buffer, made on first use; NULL when lines are written at
 * once (no flusher, or no memory). */
static struct log_buf *my_buffer(void)
{
    struct log_buf *b = my_buf;

    if (b != NULL)
        return b;
    pthread_mutex_lock(&all_mu);
    if (flusher_on && (b = calloc(1, sizeof(*b))) != NULL) {
        pthread_mutex_init(&b->mu, NULL);
        b->next = all_bufs;
        all_bufs = b;
        my_buf = b;
    }
    pthread_mutex_unlock(&all_mu);
    return b;
}

/* A buffer is full: wake the flusher and wait for the end of a round
 * (LOG_WAIT_MS at most). */
static void wait_round(void)
{
    struct timespec ts;
    uint64_t r;

    pthread_mutex_lock(&all_mu);
    r = rounds;
    atomic_store(&kicked, true);
    pthread_cond_signal(&flusher_cv);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += LOG_WAIT_MS * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    while (flusher_on && rounds == r)
        if (pthread_cond_timedwait(&round_cv, &all_mu, &ts) != 0)
            break;
    pthread_mutex_unlock(&all_mu);
}

/* Stamp one line (its time at slot) and append it to this thread's
 * buffer: true, or false when it must be written at once. */
static bool buffer_line(char *line, size_t len, size_t slot)
{
    struct log_buf *b = my_buffer();
    struct timespec ts;
    int64_t t;
    bool kick;

    if (b == NULL)
        return false;
    for (int tries = 0; tries < 2; tries++) {
        pthread_mutex_lock(&b->mu);
        t = now_ns(&ts); /* under the lock the swap takes: see above */
        format_time(line + slot, &ts);
        if (rec_append(&b->data, &b->len, &b->cap, LOG_BUF_MAX, t, line, len) ==
            0) {
            kick = b->len > LOG_BUF_KICK;
            pthread_mutex_unlock(&b->mu);
            if (kick && !atomic_exchange(&kicked, true))
                pthread_cond_signal(&flusher_cv);
            return true;
        }
        pthread_mutex_unlock(&b->mu);
        wait_round();
    }
    return false;
}

/* Stamp a finished line (its time at slot; the newline added here) and
 * hand it to the buffers, or write it at once. */
static void emit(char *line, size_t pos, size_t slot)
{
    struct timespec ts;

    line[pos++] = '\n';
    if (buffer_line(line, pos, slot))
        return;
    pthread_mutex_lock(&direct_mu);
    clock_gettime(CLOCK_REALTIME, &ts);
    format_time(line + slot, &ts);
    write_all(line, pos);
    pthread_mutex_unlock(&direct_mu);
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
    flush_round(INT64_MAX); /* the writers are gone: everything */
    for (b = all_bufs; b != NULL; b = next) {
        next = b->next;
        pthread_mutex_destroy(&b->mu);
        free(b->data);
        free(b->out);
        free(b);
    }
    all_bufs = NULL;
    free(carry);
    free(carry_next);
    free(ents);
    carry = carry_next = NULL;
    carry_len = carry_cap = carry_next_cap = 0;
    ents = NULL;
    ents_cap = 0;
    pthread_cond_broadcast(&round_cv);
    pthread_mutex_unlock(&all_mu);
    my_buf = NULL; /* other threads have ended: the server is stopped */
}

static char *log_path; /* owned: --log-file, NULL for stderr */

/* Open path for appending: the fd, or -1 with the reason in err. */
static int open_log(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);

    if (fd < 0)
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    return fd;
}

int log_open_file(const char *path, char *err, size_t errlen)
{
    int fd = open_log(path, err, errlen);
    char *copy = fd >= 0 ? strdup(path) : NULL;

    if (fd < 0)
        return -1;
    if (copy == NULL) {
        close(fd);
        snprintf(err, errlen, "cannot open %s: out of memory", path);
        return -1;
    }
    if (log_fd != STDERR_FILENO)
        close(log_fd);
    free(log_path);
    log_path = copy;
    log_fd = fd;
    return 0;
}

const char *log_file_path(void)
{
    return log_path;
}

int log_reopen(char *err, size_t errlen)
{
    struct timespec ts;
    int fd, rc = 0;

    if (log_path == NULL)
        return 0;
    pthread_mutex_lock(&all_mu);
    pthread_mutex_lock(&direct_mu);
    if (flusher_on) /* the lines stamped before now go to the old file */
        flush_round(now_ns(&ts));
    fd = open_log(log_path, err, errlen);
    if (fd < 0) {
        rc = -1;
    } else if (dup2(fd, log_fd) < 0) { /* log_fd stays open: no race */
        snprintf(err, errlen, "cannot reopen %s: %s", log_path,
                 strerror(errno));
        rc = -1;
    }
    if (fd >= 0)
        close(fd);
    pthread_mutex_unlock(&direct_mu);
    pthread_mutex_unlock(&all_mu);
    return rc;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char msg[LOG_LINE_MAX];
    char line[LOG_LINE_MAX * 2];
    size_t pos = 0, slot = 0;
    va_list ap;
    int json = log_fmt == LOG_FORMAT_JSON;

    if (level < log_min)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap); /* truncation is acceptable */
    va_end(ap);
    if (json) {
        logfmt_put_raw(line, sizeof(line) - 1, &pos, "{\"time\":\"");
        put_time(line, sizeof(line) - 1, &pos, &slot);
        logfmt_put_raw(line, sizeof(line) - 1, &pos, "\",\"level\":\"");
        logfmt_put_raw(line, sizeof(line) - 1, &pos, level_names[level]);
        logfmt_put_raw(line, sizeof(line) - 1, &pos, "\",\"msg\":\"");
        logfmt_put_escaped(line, sizeof(line) - 3, &pos, msg, 1);
        logfmt_put_raw(line, sizeof(line) - 1, &pos, "\"}");
    } else {
        put_time(line, sizeof(line) - 1, &pos, &slot);
        logfmt_put_raw(line, sizeof(line) - 1, &pos, " ");
        logfmt_put_raw(line, sizeof(line) - 1, &pos, level_names[level]);
        logfmt_put_raw(line, sizeof(line) - 1, &pos, " ");
        logfmt_put_escaped(line, sizeof(line) - 1, &pos, msg, 0);
    }
    emit(line, pos, slot);
}

/* Append one field, ` name=value` (text) or `,"name":value` (JSON). */
static void put_field(
    char *buf, size_t cap, size_t *pos, const struct log_field *f, int json)
{
    if (f->name == NULL || *pos + 64 >= cap)
        return;
    logfmt_put_raw(buf, cap, pos, json ? ",\"" : " ");
    logfmt_put_escaped(buf, cap - 32, pos, f->name, json);
    logfmt_put_raw(buf, cap, pos, json ? "\":" : "=");
    if (f->str == NULL) {
        logfmt_put_i64(buf, cap, pos, f->num);
        return;
    }
    logfmt_put_raw(buf, cap, pos, "\"");
    logfmt_put_escaped_n(buf, cap - 8, pos, f->str,
                         f->len < LOG_FIELD_MAX ? f->len : LOG_FIELD_MAX, json);
    logfmt_put_raw(buf, cap, pos, "\"");
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

void log_access(const char *method,
                const char *path,
                unsigned status,
                int64_t duration_us,
                const char *request_id,
                const struct log_field *fields,
                size_t n)
{
    char line[LOG_LINE_MAX * 2];
    size_t pos = 0, slot = 0;
    size_t cap = sizeof(line) - 2;
    int json = log_fmt == LOG_FORMAT_JSON;

    if (LOG_LEVEL_INFO < log_min)
        return;
    if (json) {
        logfmt_put_raw(line, cap, &pos, "{\"time\":\"");
        put_time(line, cap, &pos, &slot);
        logfmt_put_raw(line, cap, &pos,
                       "\",\"level\":\"info\",\"msg\":\"access\","
                       "\"method\":\"");
        logfmt_put_escaped(line, cap - 200, &pos, method, 1);
        logfmt_put_raw(line, cap, &pos, "\",\"path\":\"");
        logfmt_put_escaped(line, cap - 200, &pos, path, 1);
        logfmt_put_raw(line, cap, &pos, "\",\"status\":");
        logfmt_put_i64(line, cap, &pos, status);
        logfmt_put_raw(line, cap, &pos, ",\"duration_ms\":");
        logfmt_put_ms(line, cap, &pos, duration_us);
        if (request_id != NULL) {
            logfmt_put_raw(line, cap, &pos, ",\"request_id\":\"");
            logfmt_put_escaped(line, cap - 4, &pos, request_id, 1);
            logfmt_put_raw(line, cap, &pos, "\"");
        }
        put_fields(line, cap - 2, &pos, fields, n, 1);
        logfmt_put_raw(line, cap, &pos, "}");
    } else {
        put_time(line, cap, &pos, &slot);
        logfmt_put_raw(line, cap, &pos, " info access ");
        logfmt_put_escaped(line, cap - 200, &pos, method, 0);
        logfmt_put_raw(line, cap, &pos, " ");
        logfmt_put_escaped(line, cap - 200, &pos, path, 0);
        logfmt_put_raw(line, cap, &pos, " ");
        logfmt_put_i64(line, cap, &pos, status);
        logfmt_put_raw(line, cap, &pos, " ");
        logfmt_put_ms(line, cap, &pos, duration_us);
        logfmt_put_raw(line, cap, &pos, "ms");
        if (request_id != NULL) {
            logfmt_put_raw(line, cap, &pos, " request_id=");
            logfmt_put_escaped(line, cap, &pos, request_id, 0);
        }
        put_fields(line, cap, &pos, fields, n, 0);
    }
    emit(line, pos, slot);
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
    size_t pos = 0, slot = 0;
    size_t cap = sizeof(line) - 2;
    int json = log_fmt == LOG_FORMAT_JSON;

    if (json) {
        logfmt_put_raw(line, cap, &pos, "{\"time\":\"");
        put_time(line, cap, &pos, &slot);
        logfmt_put_raw(line, cap, &pos, "\",\"level\":\"");
        logfmt_put_raw(line, cap, &pos, level_names[level]);
        logfmt_put_raw(line, cap, &pos, "\",\"msg\":\"event\",\"event\":\"");
        logfmt_put_escaped(line, cap - 64, &pos, event, 1);
        logfmt_put_raw(line, cap, &pos, "\"");
        put_fields(line, cap - 2, &pos, fields, n, 1);
        logfmt_put_raw(line, cap, &pos, "}");
    } else {
        put_time(line, cap, &pos, &slot);
        logfmt_put_raw(line, cap, &pos, " ");
        logfmt_put_raw(line, cap, &pos, level_names[level]);
        logfmt_put_raw(line, cap, &pos, " event ");
        logfmt_put_escaped(line, cap - 64, &pos, event, 0);
        put_fields(line, cap, &pos, fields, n, 0);
    }
    emit(line, pos, slot);
}
