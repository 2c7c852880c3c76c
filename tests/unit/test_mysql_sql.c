/*
 * tests/unit/test_mysql_sql.c - the MySQL adapter's SQL text
 * (backends/mysql/sql.c) against its schema file, with no server:
 * the tables the adapter creates are those of the file, column for column
 * and type for type, and every table and column name any statement uses is
 * one of the schema's. A column renamed in sql.c or in schema.sql alone
 * fails here instead of on a live database.
 *
 * How a statement is read: its placeholders are expanded for the default
 * table (lockd_locks); `quoted` names are tables; a word followed by '('
 * is a function (or a type); words after AS and after ')' are aliases;
 * SQL keywords are listed below. Every other word must be a column of one
 * of the tables the statement names. A new keyword in a statement means
 * adding it to sql_keywords[].
 *
 * The schema file is backends/mysql/schema.sql, the lock-kinds layout
 * meant to replace deploy/mysql/schema.sql (which the adapter's branch may
 * not edit); the test says whether the two still differ. It is found from
 * this source file's path (__FILE__), else from the program's
 * (ROOT/BUILD/tests/unit/test_mysql_sql), else from $LOCKD_SCHEMA.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/mysql/sql.h"
#include "tests/unit/check.h"

#define TABLE       "lockd_locks" /* the default, as in schema.sql */
#define SCHEMA_FILE "deploy/mysql/schema.sql"
#define MAX_TABLES  8
#define MAX_COLS    16
#define MAX_ENTRIES 24
#define MAX_WORDS   128
#define NAME_MAX_   64

/* One CREATE TABLE: its columns and their definitions, and every entry
 * (columns, keys) as written, whitespace collapsed. */
struct table {
    char name[NAME_MAX_];
    int ncols;
    char cols[MAX_COLS][NAME_MAX_];
    int nentries;
    char entries[MAX_ENTRIES][160];
};

struct schema {
    int ntables;
    struct table tables[MAX_TABLES];
};

static const char *const sql_keywords[] = {
    "ADD",       "ALTER",     "AND",
    "AS",        "ATOMIC",    "AUTO_INCREMENT",
    "BEGIN",     "BIGINT",    "BY",
    "COLUMN",    "COMMIT",    "CREATE",
    "DECLARE",   "DEFAULT",   "DELETE",
    "DO",        "DUPLICATE", "ELSE",
    "ELSEIF",    "END",       "ENGINE",
    "EXISTS",    "FOR",       "FROM",
    "GROUP",     "HAVING",    "IF",
    "IGNORE",    "InnoDB",    "INSERT",
    "INT",       "INTO",      "IS",
    "JOIN",      "KEY",       "LEFT",
    "LIMIT",     "NOT",       "NULL",
    "ON",        "OR",        "ORDER",
    "PRIMARY",   "ROLLBACK",  "SELECT",
    "SET",       "SIGNED",    "STRAIGHT_JOIN",
    "TABLE",     "THEN",      "TINYINT",
    "UNSIGNED",  "UPDATE",    "VALUES",
    "VARBINARY", "WHERE",     NULL,
};

/* "ok what" or "FAIL what", the latter counted as a failed check. */
static void __attribute__((format(printf, 2, 3)))
verdict(bool ok, const char *fmt, ...)
{
    va_list ap;

    printf("%s ", ok ? "ok" : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!ok)
        check_failures++;
}

/* ---- reading deploy/mysql/schema.sql ---- */

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;

    if (f == NULL)
        return NULL;
    buf = malloc(65536);
    n = buf != NULL ? fread(buf, 1, 65535, f) : 0;
    fclose(f);
    if (buf != NULL)
        buf[n] = '\0';
    return buf;
}

/* The text of deploy/mysql/schema.sql, or NULL (path says where it was
 * looked for last). */
static char *schema_text(char *path, size_t size)
{
    const char *file = __FILE__; /* tests/unit/test_mysql_sql.c */
    const char *slash = strrchr(file, '/');
    const char *env = getenv("LOCKD_SCHEMA");
    char exe[900];
    ssize_t n;
    char *text;

    snprintf(path, size, "%.*s/../../" SCHEMA_FILE,
             slash != NULL ? (int)(slash - file) : 1,
             slash != NULL ? file : ".");
    if ((text = read_file(path)) != NULL)
        return text;
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 4;
             up++) { /* test_mysql_sql, unit, tests, BUILD */
            char *s = strrchr(exe, '/');
            if (s != NULL)
                *s = '\0';
        }
        snprintf(path, size, "%s/" SCHEMA_FILE, exe);
        if ((text = read_file(path)) != NULL)
            return text;
    }
    if (env != NULL) {
        snprintf(path, size, "%s", env);
        return read_file(path);
    }
    return NULL;
}

/* SQL text without "-- ..." comments and `quotes`, whitespace collapsed
 * to single spaces. A new string. */
static char *normalize(const char *sql)
{
    char *out = malloc(strlen(sql) + 1), *p = out;

    if (out == NULL)
        return NULL;
    for (const char *s = sql; *s != '\0'; s++) {
        if (s[0] == '-' && s[1] == '-') {
            while (s[1] != '\0' && s[1] != '\n')
                s++;
            continue;
        }
        if (*s == '`')
            continue;
        if (isspace((unsigned char)*s)) {
            if (p > out && p[-1] != ' ')
                *p++ = ' ';
            continue;
        }
        *p++ = *s;
    }
    while (p > out && p[-1] == ' ')
        p--;
    *p = '\0';
    return out;
}

/* The first word of s[0..n) into out. */
static void first_word(const char *s, size_t n, char *out, size_t size)
{
    size_t i = 0;

    while (i < n && s[i] == ' ')
        i++;
    s += i;
    n -= i;
    for (i = 0;
         i < n && i + 1 < size && (isalnum((unsigned char)s[i]) || s[i] == '_');
         i++)
        out[i] = s[i];
    out[i] = '\0';
}

/* One entry of a table's body (a column or a key), trimmed. */
static void add_entry(struct table *t, const char *s, size_t n)
{
    char word[NAME_MAX_];

    while (n > 0 && *s == ' ')
        s++, n--;
    while (n > 0 && s[n - 1] == ' ')
        n--;
    if (n == 0 || t->nentries == MAX_ENTRIES)
        return;
    snprintf(t->entries[t->nentries++], sizeof(t->entries[0]), "%.*s", (int)n,
             s);
    first_word(s, n, word, sizeof(word));
    if (strcmp(word, "PRIMARY") == 0 || strcmp(word, "KEY") == 0 ||
        strcmp(word, "UNIQUE") == 0 || strcmp(word, "INDEX") == 0 ||
        strcmp(word, "CONSTRAINT") == 0 || t->ncols == MAX_COLS)
        return;
    snprintf(t->cols[t->ncols++], NAME_MAX_, "%s", word);
}

/* Every "CREATE TABLE [IF NOT EXISTS] name (...)" in sql into s. */
static void parse_schema(const char *sql, struct schema *s)
{
    char *text = normalize(sql);
    const char *p = text;
    const char *start;

    memset(s, 0, sizeof(*s));
    while (text != NULL && (p = strstr(p, "CREATE TABLE ")) != NULL &&
           s->ntables < MAX_TABLES) {
        struct table *t = &s->tables[s->ntables++];
        int depth = 0;

        p += strlen("CREATE TABLE ");
        if (strncmp(p, "IF NOT EXISTS ", 14) == 0)
            p += 14;
        first_word(p, strlen(p), t->name, sizeof(t->name));
        p = strchr(p, '(');
        if (p == NULL)
            break;
        start = ++p;
        for (; *p != '\0'; p++) {
            if (*p == '(') {
                depth++;
            } else if (*p == ')' && depth > 0) {
                depth--;
            } else if ((*p == ',' || *p == ')') && depth == 0) {
                add_entry(t, start, (size_t)(p - start));
                start = p + 1;
                if (*p == ')')
                    break;
            }
        }
    }
    free(text);
}

static const struct table *find_table(const struct schema *s, const char *name)
{
    for (int i = 0; i < s->ntables; i++)
        if (strcmp(s->tables[i].name, name) == 0)
            return &s->tables[i];
    return NULL;
}

static bool has_column(const struct table *t, const char *col)
{
    for (int i = 0; i < t->ncols; i++)
        if (strcmp(t->cols[i], col) == 0)
            return true;
    return false;
}

/* The schema of deploy/mysql/schema.sql; false (and a FAIL line) when the
 * file cannot be read or holds no table. */
static bool file_schema(struct schema *s)
{
    char path[1024];
    char *text = schema_text(path, sizeof(path));

    memset(s, 0, sizeof(*s));
    if (text == NULL) {
        verdict(false, "cannot read %s", path);
        return false;
    }
    parse_schema(text, s);
    free(text);
    if (s->ntables == 0) {
        verdict(false, "no CREATE TABLE in %s", path);
        return false;
    }
    return true;
}

/* ---- reading a statement ---- */

struct words {
    int n;
    char w[MAX_WORDS][NAME_MAX_];
};

static bool in_words(const struct words *ws, const char *w)
{
    for (int i = 0; i < ws->n; i++)
        if (strcmp(ws->w[i], w) == 0)
            return true;
    return false;
}

static void add_word(struct words *ws, const char *w)
{
    if (ws->n < MAX_WORDS && !in_words(ws, w))
        snprintf(ws->w[ws->n++], NAME_MAX_, "%s", w);
}

static bool is_keyword(const char *w)
{
    for (int i = 0; sql_keywords[i] != NULL; i++)
        if (strcmp(sql_keywords[i], w) == 0)
            return true;
    return false;
}

/* The local variables a compound statement declares ("DECLARE a, b
 * TYPE"): names, not columns. */
static void read_locals(const char *sql, struct words *locals)
{
    const char *p = sql;

    memset(locals, 0, sizeof(*locals));
    while ((p = strstr(p, "DECLARE ")) != NULL) {
        p += strlen("DECLARE ");
        for (;;) {
            size_t n = 0;
            char word[NAME_MAX_];

            while ((isalnum((unsigned char)p[n]) || p[n] == '_') &&
                   n + 1 < sizeof(word))
                n++;
            snprintf(word, sizeof(word), "%.*s", (int)n, p);
            add_word(locals, word);
            p += n;
            if (strncmp(p, ", ", 2) != 0)
                break;
            p += 2;
        }
    }
}

/* Split sql into its `tables` and the names that must be columns. */
static void
read_statement(const char *sql, struct words *tables, struct words *names)
{
    struct words aliases = { 0 }, plain = { 0 }, locals;
    const char *p = sql;
    char prev = ' ', word[NAME_MAX_], last[NAME_MAX_] = "";

    memset(tables, 0, sizeof(*tables));
    memset(names, 0, sizeof(*names));
    read_locals(sql, &locals);
    while (*p != '\0') {
        if (*p == '\'') { /* a string literal */
            p = strchr(p + 1, '\'');
            p = p != NULL ? p + 1 : sql + strlen(sql);
            prev = 'x';
            continue;
        }
        if (*p == '`') {
            const char *end = strchr(p + 1, '`');
            size_t n = end != NULL ? (size_t)(end - p - 1) : 0;
            snprintf(word, sizeof(word), "%.*s", (int)n, p + 1);
            add_word(tables, word);
            p = end != NULL ? end + 1 : sql + strlen(sql);
            prev = 'x';
            continue;
        }
        if (isdigit((unsigned char)*p)) {
            while (isalnum((unsigned char)*p) || *p == '.')
                p++;
            prev = '0';
            continue;
        }
        if (!isalpha((unsigned char)*p) && *p != '_') {
            if (!isspace((unsigned char)*p))
                prev = *p;
            p++;
            continue;
        }
        size_t n = 0;
        while ((isalnum((unsigned char)p[n]) || p[n] == '_') &&
               n + 1 < sizeof(word))
            n++;
        snprintf(word, sizeof(word), "%.*s", (int)n, p);
        p += n;
        const char *q = p;
        while (*q == ' ')
            q++;
        if (strcasecmp(last, "AS") == 0 || prev == ')')
            add_word(&aliases, word);
        else if (*q != '(' && !is_keyword(word) && !in_words(&locals, word))
            add_word(&plain, word);
        snprintf(last, sizeof(last), "%s", word);
        prev = 'x';
    }
    for (int i = 0; i < plain.n; i++)
        if (!in_words(&aliases, plain.w[i]))
            add_word(names, plain.w[i]);
}

/* Every table and column name sql uses is in s: ok/FAIL lines. */
static void
check_statement(const struct schema *s, const char *name, const char *tmpl)
{
    char *sql = mysql_sql_expand(tmpl, TABLE);
    struct words tables, names;
    bool ok = true;

    CHECK(sql != NULL);
    if (sql == NULL)
        return;
    read_statement(sql, &tables, &names);
    for (int i = 0; i < tables.n; i++) {
        if (find_table(s, tables.w[i]) == NULL) {
            verdict(false, "%s: table %s is not in schema.sql", name,
                    tables.w[i]);
            ok = false;
        }
    }
    for (int i = 0; i < names.n; i++) {
        bool found = false;
        for (int j = 0; j < tables.n && !found; j++) {
            const struct table *t = find_table(s, tables.w[j]);
            found = t != NULL && has_column(t, names.w[i]);
        }
        if (!found) {
            verdict(false,
                    "%s: '%s' is no column of its tables in schema.sql "
                    "(nor a keyword the test knows)",
                    name, names.w[i]);
            ok = false;
        }
    }
    if (ok)
        verdict(true, "%s: %d tables, %d columns in schema.sql", name, tables.n,
                names.n);
    free(sql);
}

/* ---- cases ---- */

static void test_schema_file_has_tables_and_columns(void)
{
    struct schema s;

    if (!file_schema(&s))
        return;
    for (int i = 0; i < s.ntables; i++)
        verdict(s.tables[i].ncols > 0, "schema.sql: table %s, %d columns",
                s.tables[i].name, s.tables[i].ncols);
}

static void test_created_tables_match_schema_file(void)
{
    struct schema file, made;
    char *all = NULL;
    size_t len = 0;

    if (!file_schema(&file))
        return;
    /* the adapter's CREATE TABLEs, expanded, as one text */
    for (int i = 0; i < MYSQL_SQL_SCHEMA_N; i++) {
        char *sql = mysql_sql_expand(mysql_sql_schema[i].text, TABLE);
        char *grown = sql != NULL ? realloc(all, len + strlen(sql) + 3) : NULL;
        CHECK(grown != NULL);
        if (grown == NULL) {
            free(sql);
            free(all);
            return;
        }
        all = grown;
        len += (size_t)sprintf(all + len, "%s;\n", sql);
        free(sql);
    }
    parse_schema(all, &made);
    free(all);
    verdict(made.ntables == file.ntables,
            "sql.c creates %d tables, schema.sql %d", made.ntables,
            file.ntables);
    for (int i = 0; i < made.ntables; i++) {
        const struct table *m = &made.tables[i];
        const struct table *f = find_table(&file, m->name);
        bool same = f != NULL && f->nentries == m->nentries;

        for (int j = 0; same && j < m->nentries; j++)
            same = strcmp(m->entries[j], f->entries[j]) == 0;
        verdict(same, "sql.c's table %s is schema.sql's, entry for entry",
                m->name);
        for (int j = 0; !same && f != NULL && j < m->nentries; j++)
            if (j >= f->nentries || strcmp(m->entries[j], f->entries[j]) != 0)
                printf("  sql.c: %s\n  schema.sql: %s\n", m->entries[j],
                       j < f->nentries ? f->entries[j] : "(none)");
    }
}

static void test_prepared_statements_use_schema_names(void)
{
    struct schema s;

    if (!file_schema(&s))
        return;
    for (int i = 0; i < MYSQL_ST_COUNT; i++)
        check_statement(&s, mysql_sql_stmts[i].name, mysql_sql_stmts[i].text);
}

static void test_setup_statements_use_schema_names(void)
{
    static const struct {
        const struct mysql_sql *list;
        int n;
    } lists[] = {
        { mysql_sql_schema, MYSQL_SQL_SCHEMA_N },
        { mysql_sql_probe, MYSQL_SQL_PROBE_N },
        { mysql_sql_seed, MYSQL_SQL_SEED_N },
        { &mysql_sql_kinds_probe, 1 },
        { &mysql_sql_kinds_upgrade, 1 },
    };
    struct schema s;

    if (!file_schema(&s))
        return;
    for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++)
        for (int i = 0; i < lists[l].n; i++)
            check_statement(&s, lists[l].list[i].name, lists[l].list[i].text);
}

/* A compound statement's local variable takes the place of a column of
 * the same name in its statements (MariaDB looks for a variable first),
 * so every local is named v_..., which no column is; and its parameters
 * are its DECLAREs' defaults, in the order the C binds them. */
static void test_compound_statements_name_locals_apart(void)
{
    static const struct {
        enum mysql_stmt_id id;
        int params;
    } blocks[] = {
        { MYSQL_ST_ACQ_BLOCK, 7 },
        { MYSQL_ST_REL_BLOCK, 3 },
        { MYSQL_ST_RENEW_BLOCK, 5 },
    };

    for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
        const struct mysql_sql *st = &mysql_sql_stmts[blocks[i].id];
        struct words locals;
        int params = 0, defaults = 0;
        bool ok = strncmp(st->text, "BEGIN NOT ATOMIC ", 17) == 0;

        read_locals(st->text, &locals);
        for (int j = 0; j < locals.n; j++)
            ok = ok && strncmp(locals.w[j], "v_", 2) == 0;
        for (const char *p = st->text; (p = strchr(p, '?')) != NULL; p++)
            params++;
        for (const char *p = st->text; (p = strstr(p, "DEFAULT ?;")) != NULL;
             p++)
            defaults++;
        verdict(ok && locals.n > 0 && params == blocks[i].params &&
                    defaults == params,
                "%s: %d locals, all v_...; %d parameters, each a DECLARE's "
                "default",
                st->name, locals.n, params);
    }
}

/* Session settings name variables, never a table. */
static void test_session_statements_name_no_table(void)
{
    for (int i = 0; i <= MYSQL_SQL_SESSION_N; i++) {
        const struct mysql_sql *st = i < MYSQL_SQL_SESSION_N
                                         ? &mysql_sql_session[i]
                                         : &mysql_sql_session_idle;
        verdict(st->text != NULL && strchr(st->text, '@') == NULL,
                "%s: no table", st->name);
    }
}

/* Every slot of every list is filled, under a name of its own. */
static void test_every_statement_has_name_and_text(void)
{
    for (int i = 0; i < MYSQL_ST_COUNT; i++) {
        const struct mysql_sql *st = &mysql_sql_stmts[i];
        bool ok = st->name != NULL && st->text != NULL &&
                  strchr(st->text, '@') != NULL;
        for (int j = 0; ok && j < i; j++)
            ok = strcmp(mysql_sql_stmts[j].name, st->name) != 0;
        verdict(ok, "statement %d (%s): named, with a table", i,
                st->name != NULL ? st->name : "(no name)");
    }
}

static void test_expand_replaces_placeholders_only(void)
{
    char *s =
        mysql_sql_expand("SELECT 1 FROM @T, @S, @E, @F WHERE x = '@X'", "t_1");

    CHECK_STR_EQ(s, "SELECT 1 FROM `t_1`, `t_1_seq`, `t_1_events`, "
                    "`t_1_fence` WHERE x = '@X'");
    verdict(s != NULL, "mysql_sql_expand");
    free(s);
}

/* The multi-key statements take a list of exactly LOCK_MULTI_MAX keys
 * (backends/mysql/multi.c binds that many parameters, and one more for the
 * token where there is one): a statement with fewer would read past the
 * binds, one with more would fail on every call. */
static void test_multi_statements_take_every_key(void)
{
    static const struct {
        enum mysql_stmt_id id;
        int params;
    } want[] = {
        { MYSQL_ST_STRIPES, LOCK_MULTI_MAX },
        { MYSQL_ST_MULTI_HELD, LOCK_MULTI_MAX },
        { MYSQL_ST_MULTI_READ, LOCK_MULTI_MAX + 1 },
        { MYSQL_ST_MULTI_SETTLE, LOCK_MULTI_MAX + 1 },
    };

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct mysql_sql *st = &mysql_sql_stmts[want[i].id];
        int n = 0;
        for (const char *p = st->text; *p != '\0'; p++)
            n += *p == '?';
        verdict(n == want[i].params, "%s: %d parameters, want %d", st->name, n,
                want[i].params);
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_schema_file_has_tables_and_columns),
    CHECK_CASE(test_created_tables_match_schema_file),
    CHECK_CASE(test_prepared_statements_use_schema_names),
    CHECK_CASE(test_setup_statements_use_schema_names),
    CHECK_CASE(test_session_statements_name_no_table),
    CHECK_CASE(test_every_statement_has_name_and_text),
    CHECK_CASE(test_expand_replaces_placeholders_only),
    CHECK_CASE(test_multi_statements_take_every_key),
    CHECK_CASE(test_compound_statements_name_locals_apart),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}
