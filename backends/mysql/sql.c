/*
 * backends/mysql/sql.c - all the SQL text of the MySQL adapter: the
 * prepared statements of every operation, the schema it creates (the same
 * tables as deploy/mysql/schema.sql), the probes and fence seed run before
 * first use, and the session settings of every connection. Kept apart from
 * the C that runs them so that a column or table renamed in one place
 * shows up in one diff, and in tests/unit/test_mysql_sql.c, which checks
 * every name used here against deploy/mysql/schema.sql.
 */
#include "backends/mysql/sql.h"

#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The database's clock in unix ms; the session's time zone is UTC. */
#define NOW_MS "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

/* The fence sequence row (row 1 of @S) of earlier versions is retired at
 * start-up by setting it to this value: an older lockd still running then
 * fails its bump (above LOCK_FENCE_MAX) instead of handing out a fence from
 * the old counter. */
#define SEQ_RETIRED "9007199254740991" /* LOCK_FENCE_MAX */

/* The greatest fence (LOCK_FENCE_MAX): a greater one is never granted. */
#define FENCE_MAX "9007199254740991"

/* A key's stripe: one of rows 128..255 of @S, which are never deleted.
 * Every statement that may insert a key's row locks its stripe row first
 * (INSERT ... SELECT ... FOR UPDATE, in the same round trip), so two
 * inserts of one key never run at once. Without it they would: a key row
 * just deleted (release, reaper) leaves a delete-marked record, and
 * InnoDB's duplicate check takes gap locks on it even at READ COMMITTED,
 * which deadlock two inserts of that key. The parameter is the key. */
#define STRIPE_OF(k) "128 + CRC32(" k ") % 128"
#define STRIPE       STRIPE_OF("?")

/* Rows 128..255 of @S, the stripes. */
/* clang-format off */
#define STRIPE_ROWS \
    "(128, 0), (129, 0), (130, 0), (131, 0), (132, 0), (133, 0), " \
    "(134, 0), (135, 0), (136, 0), (137, 0), (138, 0), (139, 0), " \
    "(140, 0), (141, 0), (142, 0), (143, 0), (144, 0), (145, 0), " \
    "(146, 0), (147, 0), (148, 0), (149, 0), (150, 0), (151, 0), " \
    "(152, 0), (153, 0), (154, 0), (155, 0), (156, 0), (157, 0), " \
    "(158, 0), (159, 0), (160, 0), (161, 0), (162, 0), (163, 0), " \
    "(164, 0), (165, 0), (166, 0), (167, 0), (168, 0), (169, 0), " \
    "(170, 0), (171, 0), (172, 0), (173, 0), (174, 0), (175, 0), " \
    "(176, 0), (177, 0), (178, 0), (179, 0), (180, 0), (181, 0), " \
    "(182, 0), (183, 0), (184, 0), (185, 0), (186, 0), (187, 0), " \
    "(188, 0), (189, 0), (190, 0), (191, 0), (192, 0), (193, 0), " \
    "(194, 0), (195, 0), (196, 0), (197, 0), (198, 0), (199, 0), " \
    "(200, 0), (201, 0), (202, 0), (203, 0), (204, 0), (205, 0), " \
    "(206, 0), (207, 0), (208, 0), (209, 0), (210, 0), (211, 0), " \
    "(212, 0), (213, 0), (214, 0), (215, 0), (216, 0), (217, 0), " \
    "(218, 0), (219, 0), (220, 0), (221, 0), (222, 0), (223, 0), " \
    "(224, 0), (225, 0), (226, 0), (227, 0), (228, 0), (229, 0), " \
    "(230, 0), (231, 0), (232, 0), (233, 0), (234, 0), (235, 0), " \
    "(236, 0), (237, 0), (238, 0), (239, 0), (240, 0), (241, 0), " \
    "(242, 0), (243, 0), (244, 0), (245, 0), (246, 0), (247, 0), " \
    "(248, 0), (249, 0), (250, 0), (251, 0), (252, 0), (253, 0), " \
    "(254, 0), (255, 0)"
/* clang-format on */

/* LOCK_MULTI_MAX parameters, for a list of keys: one prepared statement
 * serves every n (the unused ones are NULL, which matches no row). */
#define Q8       "?, ?, ?, ?, ?, ?, ?, ?"
#define KEYS_MAX Q8 ", " Q8 ", " Q8 ", " Q8 ", " Q8 ", " Q8 ", " Q8 ", " Q8
/* The stripes of LOCK_MULTI_MAX keys (NULL for NULL). */
#define S1          STRIPE ", "
#define S8          S1 S1 S1 S1 S1 S1 S1 S1
#define STRIPES_MAX S8 S8 S8 S8 S8 S8 S8 S1 S1 S1 S1 S1 S1 S1 STRIPE

/* enum mysql_block_status (sql.h) as SQL text */
#define BLOCK_OPEN         "1"
#define BLOCK_HELD         "2"
#define BLOCK_NO_STRIPE    "3"
#define BLOCK_FENCE_OUT    "4"
#define BLOCK_GONE         "5"
#define BLOCK_NO_EVENT_ROW "6"
#define BLOCK_TOO_LATE     "7"

/* The greatest hold count (LOCK_HOLDS_MAX, backends/backend.h). */
#define HOLDS_MAX "1000000"

/* The statements that the compound statements below run too, written
 * once: each argument is the SQL of one parameter, "?" for the statement
 * on its own, a local variable (v_...) inside a compound statement. */
/* clang-format off */
#define ACQ_UPSERT_SQL(key, ttl) \
    "INSERT INTO @T (lock_key, token, owner, fence, ttl_ms, expires_at," \
    " mode, lim) SELECT " key ", '', NULL, 0, " ttl ", " NOW_MS " + " ttl \
    ", 0, 0 FROM @S WHERE id = " STRIPE_OF(key) " FOR UPDATE" \
    " ON DUPLICATE KEY UPDATE" \
    " token = IF(expires_at > " NOW_MS ", token, '')," \
    " owner = IF(expires_at > " NOW_MS ", owner, NULL)," \
    " ttl_ms = IF(expires_at > " NOW_MS ", ttl_ms, VALUES(ttl_ms))," \
    " mode = IF(expires_at > " NOW_MS ", mode, 0)," \
    " lim = IF(expires_at > " NOW_MS ", lim, 0)," \
    " expires_at = IF(expires_at > " NOW_MS "," \
    " IF(LAST_INSERT_ID((expires_at - " NOW_MS ") * 2 + mode) > 0," \
    " expires_at, expires_at), VALUES(expires_at))"
#define FENCE_NEW_SQL "INSERT INTO @F () VALUES ()"
#define ACQ_HOLDER_SQL(token, owner, fence, ttl, idem, key) \
    "INSERT INTO @H (lock_key, token, owner, fence, ttl_ms, expires_at," \
    " holds, idem) SELECT lock_key, " token ", " owner ", " fence ", " ttl \
    ", LAST_INSERT_ID(expires_at), 1, " idem " FROM @T" \
    " WHERE lock_key = " key \
    " ON DUPLICATE KEY UPDATE owner = VALUES(owner)," \
    " fence = VALUES(fence), ttl_ms = VALUES(ttl_ms)," \
    " expires_at = VALUES(expires_at), holds = 1, idem = VALUES(idem)"
#define ACQ_EXPIRED_SQL(key) \
    "SELECT MAX(fence) FROM @H WHERE lock_key = " key \
    " AND expires_at <= " NOW_MS
#define KEY_FIX_SQL(key) \
    "UPDATE @T SET expires_at = COALESCE((SELECT MAX(expires_at)" \
    " FROM @H WHERE lock_key = " key "), 0) WHERE lock_key = " key
#define RENEW_SQL(inc, ttl, key, token) \
    "UPDATE @T AS k STRAIGHT_JOIN @H AS h ON h.lock_key = k.lock_key" \
    " SET h.holds = h.holds + " inc "," \
    " h.expires_at = " NOW_MS " + COALESCE(" ttl ", h.ttl_ms)," \
    " k.expires_at = IF(k.mode = 0, " NOW_MS " + COALESCE(" ttl ", h.ttl_ms)," \
    " GREATEST(k.expires_at, " NOW_MS " + COALESCE(" ttl ", h.ttl_ms)))," \
    " h.ttl_ms = COALESCE(" ttl ", h.ttl_ms)" \
    " WHERE k.lock_key = " key " AND h.token = " token \
    " AND h.expires_at > " NOW_MS " AND h.holds + " inc " <= " HOLDS_MAX
#define RENEW_READ_SQL(key, token) \
    "SELECT h.fence, h.ttl_ms, h.expires_at, h.holds, k.mode, k.lim" \
    " FROM @T AS k STRAIGHT_JOIN @H AS h ON h.lock_key = k.lock_key" \
    " WHERE k.lock_key = " key " AND h.token = " token
/* The key row locked in a statement of its own, before any statement that
 * judges a holder live: NOW() is fixed when a statement starts, before it
 * waits for a row lock, so a renew or release that judged liveness in the
 * statement that waited (behind another instance's takeover of an expired
 * key) would act on the new holder's row with the time of before. Behind
 * this lock no takeover can happen, and the next statement reads the clock
 * after it. COUNT(*): one row (into a variable) whether the key has a row
 * or not. */
#define KEY_LOCK_SQL(key) \
    "SELECT COUNT(*) INTO v_locked FROM @T WHERE lock_key = " key " FOR UPDATE"
#define REL_X_SQL(key, token, all) \
    "DELETE k, h FROM @T AS k STRAIGHT_JOIN @H AS h" \
    " ON h.lock_key = k.lock_key WHERE k.lock_key = " key \
    " AND h.token = " token " AND h.expires_at > " NOW_MS " AND k.mode = 0" \
    " AND (h.holds = 1 OR " all " <> 0)"
#define EVENT_BUMP_SQL "UPDATE @S SET v = LAST_INSERT_ID(v + 1) WHERE id = 2"
#define EVENT_ADD_SQL(id, key) \
    "INSERT INTO @E (id, lock_key) VALUES (" id ", " key ")"

/* The compound statements (see ACQ_BLOCK below). */
#define ACQ_BLOCK_SQL \
    "BEGIN NOT ATOMIC" \
    " DECLARE v_key VARBINARY(512) DEFAULT ?;" \
    " DECLARE v_token VARBINARY(64) DEFAULT ?;" \
    " DECLARE v_owner VARBINARY(128) DEFAULT ?;" \
    " DECLARE v_idem VARBINARY(128) DEFAULT ?;" \
    " DECLARE v_ttl BIGINT UNSIGNED DEFAULT ?;" \
    " DECLARE v_stay INT DEFAULT ?;" \
    " DECLARE v_until BIGINT DEFAULT ?;" \
    " DECLARE v_status, v_rows, v_held, v_expires BIGINT DEFAULT 0;" \
    " DECLARE v_fence, v_expired BIGINT UNSIGNED DEFAULT 0;" \
    " DO LAST_INSERT_ID(0);" \
    " " ACQ_UPSERT_SQL("v_key", "v_ttl") ";" \
    " SET v_rows = ROW_COUNT(), v_held = LAST_INSERT_ID();" \
    " IF v_held <> 0 THEN" \
    "  SET v_status = " BLOCK_OPEN ";" \
    "  IF v_stay = 0 AND v_held % 2 = 0 THEN" \
    "   ROLLBACK; SET v_status = " BLOCK_HELD ";" \
    "  END IF;" \
    " ELSEIF v_rows = 0 THEN" \
    "  ROLLBACK; SET v_status = " BLOCK_NO_STRIPE ";" \
    " ELSE" \
    "  IF v_rows = 2 THEN" \
    "   " ACQ_EXPIRED_SQL("v_key") " INTO v_expired;" \
    "  END IF;" \
    "  " FENCE_NEW_SQL ";" \
    "  SET v_fence = LAST_INSERT_ID();" \
    "  IF v_fence = 0 OR v_fence > " FENCE_MAX " THEN" \
    "   ROLLBACK; SET v_status = " BLOCK_FENCE_OUT ";" \
    "  ELSE" \
    "   " ACQ_HOLDER_SQL("v_token", "v_owner", "v_fence", "v_ttl", \
                         "v_idem", "v_key") ";" \
    "   SET v_rows = ROW_COUNT(), v_expires = LAST_INSERT_ID();" \
    "   IF v_rows = 0 OR v_expires = 0 THEN" \
    "    ROLLBACK; SET v_status = " BLOCK_GONE ";" \
    "   ELSEIF " NOW_MS " > v_until THEN" \
    "    ROLLBACK; SET v_status = " BLOCK_TOO_LATE ";" \
    "   ELSE" \
    "    COMMIT;" \
    "   END IF;" \
    "  END IF;" \
    " END IF;" \
    " SELECT v_status, v_held, v_fence, v_expires, COALESCE(v_expired, 0);" \
    " END"
#define REL_BLOCK_SQL \
    "BEGIN NOT ATOMIC" \
    " DECLARE v_key VARBINARY(512) DEFAULT ?;" \
    " DECLARE v_token VARBINARY(64) DEFAULT ?;" \
    " DECLARE v_all INT DEFAULT ?;" \
    " DECLARE v_status, v_locked INT DEFAULT 0;" \
    " " KEY_LOCK_SQL("v_key") ";" \
    " " REL_X_SQL("v_key", "v_token", "v_all") ";" \
    " IF ROW_COUNT() = 0 THEN" \
    "  SET v_status = " BLOCK_OPEN ";" \
    " ELSE" \
    "  " EVENT_BUMP_SQL ";" \
    "  IF ROW_COUNT() <> 1 THEN" \
    "   ROLLBACK; SET v_status = " BLOCK_NO_EVENT_ROW ";" \
    "  ELSE" \
    "   " EVENT_ADD_SQL("LAST_INSERT_ID()", "v_key") ";" \
    "   COMMIT;" \
    "  END IF;" \
    " END IF;" \
    " SELECT v_status;" \
    " END"
#define RENEW_BLOCK_SQL \
    "BEGIN NOT ATOMIC" \
    " DECLARE v_inc INT DEFAULT ?;" \
    " DECLARE v_ttl BIGINT UNSIGNED DEFAULT ?;" \
    " DECLARE v_key VARBINARY(512) DEFAULT ?;" \
    " DECLARE v_token VARBINARY(64) DEFAULT ?;" \
    " DECLARE v_until BIGINT DEFAULT ?;" \
    " DECLARE v_status, v_locked INT DEFAULT 0;" \
    " DECLARE v_fence, v_ttl_now, v_holds, v_mode, v_lim" \
    " BIGINT UNSIGNED DEFAULT 0;" \
    " DECLARE v_expires BIGINT DEFAULT NULL;" \
    " " KEY_LOCK_SQL("v_key") ";" \
    " " RENEW_SQL("v_inc", "v_ttl", "v_key", "v_token") ";" \
    " IF ROW_COUNT() = 0 THEN" \
    "  SET v_status = " BLOCK_OPEN ";" \
    " ELSE" \
    "  " RENEW_READ_SQL("v_key", "v_token") \
    " INTO v_fence, v_ttl_now, v_expires, v_holds, v_mode, v_lim;" \
    "  IF v_expires IS NULL THEN" \
    "   ROLLBACK; SET v_status = " BLOCK_GONE ";" \
    "  ELSEIF " NOW_MS " > v_until THEN" \
    "   ROLLBACK; SET v_status = " BLOCK_TOO_LATE ";" \
    "  ELSE" \
    "   IF v_mode = 1 THEN" \
    "    " KEY_FIX_SQL("v_key") ";" \
    "   END IF;" \
    "   COMMIT;" \
    "  END IF;" \
    " END IF;" \
    " SELECT v_status, v_fence, v_ttl_now, v_expires, v_holds, v_mode," \
    " v_lim;" \
    " END"
/* clang-format on */

/* clang-format off */
#define STMT(id, sql) [MYSQL_ST_##id] = { .name = #id, .text = sql }
/* clang-format on */

/*
 * Two tables hold the locks. A key's row in @T (primary key lock_key)
 * carries its mode, its limit and the expiry of the holder that expires
 * last; it exists while the key has a holder (or an expired one not yet
 * reaped) and is locked first by every transaction that changes the key's
 * holders, so they never deadlock on each other or take gap locks. Each
 * holder is a row of @H, primary key (lock_key, token). expires_at of the
 * key's row is never below any of its holders' (it is copied from the
 * holder in exclusive mode, the MAX() of them in shared mode), so "the key
 * row has expired" means "no live holder".
 */
const struct mysql_sql mysql_sql_stmts[MYSQL_ST_COUNT] = {
    /* The key's stripe row first (see STRIPE), then the key's row.
       Held (not expired): nothing changes, and LAST_INSERT_ID() reports
       the remaining TTL times 2 plus the mode (>= 2). Missing or expired:
       the exclusive grant of the key. Columns are assigned left to right,
       so expires_at goes last. */
    STMT(ACQ_UPSERT, ACQ_UPSERT_SQL("?", "?")),
    STMT(FENCE_NEW, FENCE_NEW_SQL),
    /* the same expiry as the key's row (one clock reading); a row of an
       expired holder under the same token (never, tokens are random) is
       overwritten */
    STMT(ACQ_HOLDER, ACQ_HOLDER_SQL("?", "?", "?", "?", "?", "?")),
    /* the key row locked, made (free) if absent */
    STMT(ACQ_LOCK,
         "INSERT INTO @T (lock_key, token, owner, fence, ttl_ms, expires_at,"
         " mode, lim) SELECT ?, '', NULL, 0, 0, 0, 1, 0 FROM @S"
         " WHERE id = " STRIPE " FOR UPDATE"
         " ON DUPLICATE KEY UPDATE lock_key = lock_key"),
    /* mode, limit, key row live, live holders, the first one's TTL left,
       expired holders, the key row's TTL left, expired holders' greatest
       fence */
    STMT(ACQ_READ,
         "SELECT k.mode, k.lim, k.expires_at > " NOW_MS ","
         " COALESCE(SUM(h.expires_at > " NOW_MS "), 0),"
         " MIN(IF(h.expires_at > " NOW_MS ", h.expires_at, NULL)) - " NOW_MS ","
         " COALESCE(SUM(h.expires_at <= " NOW_MS "), 0),"
         " k.expires_at - " NOW_MS ","
         " MAX(IF(h.expires_at <= " NOW_MS ", h.fence, NULL))"
         " FROM @T AS k LEFT JOIN @H AS h ON h.lock_key = k.lock_key"
         " WHERE k.lock_key = ? GROUP BY k.lock_key"),
    STMT(IDEM,
         "SELECT h.token, h.fence, h.expires_at, h.expires_at - " NOW_MS ","
         " h.holds, k.mode, k.lim"
         " FROM @T AS k STRAIGHT_JOIN @H AS h ON h.lock_key = k.lock_key"
         " WHERE k.lock_key = ? AND h.idem = ? AND h.expires_at > " NOW_MS),
    STMT(SH_HOLDER,
         "INSERT INTO @H (lock_key, token, owner, fence, ttl_ms, expires_at,"
         " holds, idem) VALUES (?, ?, ?, ?, ?,"
         " LAST_INSERT_ID(" NOW_MS " + ?), 1, ?)"
         " ON DUPLICATE KEY UPDATE owner = VALUES(owner),"
         " fence = VALUES(fence), ttl_ms = VALUES(ttl_ms),"
         " expires_at = VALUES(expires_at), holds = 1, idem = VALUES(idem)"),
    STMT(SH_KEY,
         "UPDATE @T SET mode = 1, lim = ?, token = '', owner = NULL,"
         " expires_at = COALESCE((SELECT MAX(expires_at) FROM @H"
         " WHERE lock_key = ?), 0) WHERE lock_key = ?"),
    /* "expires_at + 0": the primary key (this key's rows), never the
       expires_at index, which would lock other keys' rows (deadlocks) */
    STMT(REAP_KEY,
         "DELETE FROM @H WHERE lock_key = ? AND expires_at + 0 <= " NOW_MS),
    STMT(KEY_FIX, KEY_FIX_SQL("?")),
    STMT(KEY_DROP,
         "DELETE FROM @T WHERE lock_key = ? AND expires_at + 0 <= " NOW_MS),
    /* Both rows, the key's first (STRAIGHT_JOIN). One NOW(3) per
       statement: in exclusive mode both get the same expiry; in shared
       mode the key keeps the greatest (KEY_FIX follows). Assignments of a
       multiple-table UPDATE run in no set order, so none reads a column
       another one sets (COALESCE(?, ttl_ms) is the same before and
       after). */
    STMT(RENEW, RENEW_SQL("?", "?", "?", "?")),
    STMT(RENEW_READ, RENEW_READ_SQL("?", "?")),
    /* key row live; this token's holds (NULL: not a live holder) */
    STMT(SETTLE,
         "SELECT k.expires_at > " NOW_MS ", h.holds FROM @T AS k"
         " LEFT JOIN @H AS h ON h.lock_key = k.lock_key AND h.token = ?"
         " AND h.expires_at > " NOW_MS " WHERE k.lock_key = ?"),
    /* the common release: the only holder's last hold, key row and holder
       row deleted together, key row first */
    STMT(REL_X, REL_X_SQL("?", "?", "?")),
    STMT(REL_LOCK,
         "SELECT k.expires_at > " NOW_MS ", h.holds FROM @T AS k"
         " LEFT JOIN @H AS h ON h.lock_key = k.lock_key AND h.token = ?"
         " AND h.expires_at > " NOW_MS " WHERE k.lock_key = ? FOR UPDATE"),
    STMT(REL_DEC,
         "UPDATE @H SET holds = holds - 1 WHERE lock_key = ? AND token = ?"),
    STMT(REL_DEL, "DELETE FROM @H WHERE lock_key = ? AND token = ?"),
    /* the live holders by fence, each with the count, the greatest fence
       and the last expiry of them all */
    STMT(INSPECT,
         "SELECT h.fence, h.expires_at, h.expires_at - " NOW_MS ", h.owner,"
         " h.holds, k.mode, k.lim, COUNT(*) OVER (), MAX(h.fence) OVER (),"
         " MAX(h.expires_at) OVER (), MAX(h.expires_at - " NOW_MS ") OVER ()"
         " FROM @T AS k STRAIGHT_JOIN @H AS h ON h.lock_key = k.lock_key"
         " WHERE k.lock_key = ? AND h.expires_at > " NOW_MS
         " ORDER BY h.fence LIMIT ?"),
    /* the reaper finds keys by expiry without a lock, then locks each
       key row by its primary key like every operation (the expires_at
       index first would be the reverse order) */
    STMT(REAP,
         "SELECT lock_key FROM @T WHERE expires_at <= " NOW_MS
         " ORDER BY expires_at LIMIT ?"),
    STMT(REAP_FIND,
         "SELECT lock_key FROM @H WHERE expires_at <= " NOW_MS
         " ORDER BY expires_at LIMIT ?"),
    /* the key row locked on its own (KEY_LOCK_SQL says why): the
       reaper's, force's, and before every renew and release */
    STMT(KEY_LOCK, "SELECT 1 FROM @T WHERE lock_key = ? FOR UPDATE"),
    STMT(COUNT_HELD, "SELECT COUNT(*) FROM @H WHERE expires_at > " NOW_MS),
    STMT(EVENT_BUMP, EVENT_BUMP_SQL),
    STMT(EVENT_ADD, EVENT_ADD_SQL("?", "?")),
    STMT(EVENTS,
         "SELECT id, lock_key FROM @E WHERE id > ? ORDER BY id"
         " LIMIT ?"),
    STMT(EVENT_TOP, "SELECT v FROM @S WHERE id = 2"),
    STMT(EVENT_TRIM, "DELETE FROM @E WHERE id <= ? LIMIT ?"),
    STMT(FENCE_TOP, "SELECT MAX(id) FROM @F"),
    /* the highest row always stays: the counter never needs the rows on
       MariaDB >= 10.2.4 and MySQL 8 (it is persistent), but older servers
       restart it at MAX(id) + 1 */
    STMT(FENCE_TRIM, "DELETE FROM @F WHERE id < ? LIMIT ?"),
    /* Every stripe row of the keys, locked in ascending id order whatever
       the plan (a range, or a scan of all 130 rows): an UPDATE at READ
       COMMITTED reads a row another transaction has locked
       semi-consistently and waits only for the rows it matches. Nothing
       changes (v = v), so nothing is written. */
    STMT(STRIPES, "UPDATE @S SET v = v WHERE id IN (" STRIPES_MAX ")"),
    /* the keys held now, each with the time until its first holder
       expires (a key row without holder rows: a lock of an older lockd,
       its own expiry); a plain read, no lock */
    STMT(MULTI_HELD,
         "SELECT k.lock_key, COALESCE((SELECT MIN(h.expires_at) FROM @H AS h"
         " WHERE h.lock_key = k.lock_key AND h.expires_at > " NOW_MS "),"
         " k.expires_at) - " NOW_MS " FROM @T AS k"
         " WHERE k.lock_key IN (" KEYS_MAX ") AND k.expires_at + 0 > " NOW_MS),
    /* after renewing them: the rows are ours, read as they now are */
    STMT(MULTI_READ,
         "SELECT h.lock_key, h.fence, h.ttl_ms, h.expires_at, k.mode"
         " FROM @T AS k STRAIGHT_JOIN @H AS h ON h.lock_key = k.lock_key"
         " WHERE k.lock_key IN (" KEYS_MAX ") AND h.token = ?"),
    /* as SETTLE, for several keys: key row live; the token's holds (NULL:
       not a live holder); keys without a row are free */
    STMT(MULTI_SETTLE,
         "SELECT k.lock_key, k.expires_at > " NOW_MS ", h.holds FROM @T AS k"
         " LEFT JOIN @H AS h ON h.lock_key = k.lock_key AND h.token = ?"
         " AND h.expires_at > " NOW_MS " WHERE k.lock_key IN (" KEYS_MAX ")"),
    /* n event ids in one step: the last of them is returned */
    STMT(EVENT_BUMP_N, "UPDATE @S SET v = LAST_INSERT_ID(v + ?) WHERE id = 2"),
    /* At most a budget of key rows (the last parameter) from a range of
       the primary key: >= the prefix, > the cursor, < the prefix's
       successor; each with the count, greatest fence, last expiry and
       owner of its live holders (count 0: expired, not yet reaped).
       Never LIKE: the bounds are bytes, compared as bytes. A plain read,
       no lock; the derived table's LIMIT caps the rows looked at however
       many of them have expired. */
    STMT(LIST,
         "SELECT k.lock_key, k.mode, COUNT(h.fence), MAX(h.fence),"
         " MAX(h.expires_at), MAX(h.expires_at) - " NOW_MS ", MAX(h.owner)"
         " FROM (SELECT lock_key, mode FROM @T WHERE lock_key >= ?"
         " AND lock_key > ? AND lock_key < ? ORDER BY lock_key LIMIT ?) AS k"
         " LEFT JOIN @H AS h ON h.lock_key = k.lock_key"
         " AND h.expires_at > " NOW_MS
         " GROUP BY k.lock_key, k.mode ORDER BY k.lock_key"),
    STMT(FORCE_HOLD, "DELETE FROM @H WHERE lock_key = ?"),
    STMT(FORCE_KEY, "DELETE FROM @T WHERE lock_key = ?"),
    /* after the exclusive acquire took over an existing key row: the
       holders it leaves behind (the key row was not live, so none is) */
    STMT(ACQ_EXPIRED, ACQ_EXPIRED_SQL("?")),
    /* MariaDB's compound statements: the common acquire, release and
       renew, each one transaction in one round trip, COMMIT included.
       They run the statements above in the order the C of the
       step-by-step path sends them, and answer one row whose first column
       is an enum mysql_block_status (sql.h). When they decide nothing
       (MYSQL_BLOCK_OPEN), the transaction stays open, with the key row
       locked, for that path to go on. A grant or renew commits only
       while the database's clock is before v_until, the moment lockd
       gives up on the call (mysql_conn_until()). */
    STMT(ACQ_BLOCK, ACQ_BLOCK_SQL),
    STMT(REL_BLOCK, REL_BLOCK_SQL),
    STMT(RENEW_BLOCK, RENEW_BLOCK_SQL),
};

/* The schema (deploy/mysql/schema.sql), run once per process while the
 * tables are not known to exist. */
const struct mysql_sql mysql_sql_schema[] = {
    { "schema @T",
      "CREATE TABLE IF NOT EXISTS @T ("
      " lock_key VARBINARY(512) NOT NULL,"
      " token VARBINARY(64) NOT NULL,"
      " owner VARBINARY(128) NULL,"
      " fence BIGINT UNSIGNED NOT NULL,"
      " ttl_ms BIGINT UNSIGNED NOT NULL,"
      " expires_at BIGINT NOT NULL,"
      " mode TINYINT UNSIGNED NOT NULL DEFAULT 0,"
      " lim INT UNSIGNED NOT NULL DEFAULT 0,"
      " PRIMARY KEY (lock_key),"
      " KEY expires_at (expires_at)"
      ") ENGINE = InnoDB",
      false },
    { "schema @H",
      "CREATE TABLE IF NOT EXISTS @H ("
      " lock_key VARBINARY(512) NOT NULL,"
      " token VARBINARY(64) NOT NULL,"
      " owner VARBINARY(128) NULL,"
      " fence BIGINT UNSIGNED NOT NULL,"
      " ttl_ms BIGINT UNSIGNED NOT NULL,"
      " expires_at BIGINT NOT NULL,"
      " holds INT UNSIGNED NOT NULL,"
      " idem VARBINARY(128) NULL,"
      " PRIMARY KEY (lock_key, token),"
      " KEY expires_at (expires_at)"
      ") ENGINE = InnoDB",
      false },
    { "schema @S",
      "CREATE TABLE IF NOT EXISTS @S ("
      " id TINYINT UNSIGNED NOT NULL,"
      " v BIGINT UNSIGNED NOT NULL,"
      " PRIMARY KEY (id)"
      ") ENGINE = InnoDB",
      false },
    { "schema @E",
      "CREATE TABLE IF NOT EXISTS @E ("
      " id BIGINT UNSIGNED NOT NULL,"
      " lock_key VARBINARY(512) NOT NULL,"
      " PRIMARY KEY (id)"
      ") ENGINE = InnoDB",
      false },
    { "schema @F",
      "CREATE TABLE IF NOT EXISTS @F ("
      " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
      " PRIMARY KEY (id)"
      ") ENGINE = InnoDB",
      false },
    /* each insert commits at once: the duplicate checks share-lock the
       rows, and the event row (2) must not stay locked behind a stripe
       that an acquire holds */
    { "schema rows", "INSERT IGNORE INTO @S (id, v) VALUES (1, 0), (2, 0)",
      false },
    { "schema commit", "COMMIT", false },
    { "schema stripes", "INSERT IGNORE INTO @S (id, v) VALUES " STRIPE_ROWS,
      false },
    { "schema stripes commit", "COMMIT", false },
};

/* Tables made by someone else (deploy/mysql/schema.sql) for a user that may
 * not create them are used as they are if these all succeed; the two
 * sequence rows must be there. */
const struct mysql_sql mysql_sql_probe[] = {
    { "probe @T", "SELECT mode, lim FROM @T LIMIT 0", false },
    { "probe @H", "SELECT holds, idem FROM @H LIMIT 0", false },
    { "probe @E", "SELECT 1 FROM @E LIMIT 0", false },
    { "probe @S row 1", "SELECT 1 FROM @S WHERE id = 1", true },
    { "probe @S row 2", "SELECT 1 FROM @S WHERE id = 2", true },
    { "probe @S stripes",
      "SELECT 1 FROM @S WHERE id >= 128 HAVING COUNT(*) = 128", true },
    { "probe @F", "SELECT 1 FROM @F LIMIT 0", false },
};

const struct mysql_sql mysql_sql_kinds_probe = {
    "kinds probe", "SELECT mode, lim FROM @T LIMIT 0", false
};

/* ALTER waits for every open transaction on the table: a short
 * lock_wait_timeout keeps it from queueing the operations behind it. */
const struct mysql_sql mysql_sql_kinds_upgrade = {
    "kinds upgrade",
    "ALTER TABLE @T"
    " ADD COLUMN mode TINYINT UNSIGNED NOT NULL DEFAULT 0,"
    " ADD COLUMN lim INT UNSIGNED NOT NULL DEFAULT 0",
    false
};

/* Run after the tables exist, by anyone who may write them.
 * First the live locks of lockd before lock kinds (the holder was the key
 * row: its token is not '') become holder rows, under their row locks so
 * an older lockd still running cannot release or renew one meanwhile; its
 * token is then cleared, so that it cannot later either. Rows an older
 * lockd still running grants after this (or in the instant before the
 * clearing) are still held (the key row's expiry) until they expire, but
 * show no holder: run one version at a time where that matters. Every
 * step locks key rows before holder rows, as the operations do.
 * The fence counter starts above every fence handed out before: those
 * of the old sequence row (until it is retired), and those still in the
 * lock tables (a fence table made again). The old row's lock is held
 * throughout, so an older lockd granting meanwhile either committed below
 * the seed or fails on the retired row. */
const struct mysql_sql mysql_sql_seed[] = {
    /* first: every instance's connections start here, one at a time */
    { "seed lock", "SELECT v FROM @S WHERE id = 1 FOR UPDATE", false },
    /* the old rows, locked; an UPDATE reads rows others have locked as
       last committed instead of waiting for them (not old rows) */
    { "migrate lock", "UPDATE @T SET token = token WHERE token <> ''", false },
    { "migrate holders",
      "INSERT IGNORE INTO @H (lock_key, token, owner, fence, ttl_ms,"
      " expires_at, holds, idem) SELECT lock_key, token, owner, fence,"
      " ttl_ms, expires_at, 1, NULL FROM @T WHERE token <> ''"
      " AND expires_at > " NOW_MS,
      false },
    /* key rows only: reading holder rows here would lock them before
       key rows, the reverse of every operation */
    { "migrate keys",
      "UPDATE @T SET token = '', mode = 0, lim = 0 WHERE token <> ''", false },
    /* IGNORE: a grant meanwhile may have taken that id (the counter is
       then past it anyway) */
    { "seed fence",
      "INSERT IGNORE INTO @F (id) SELECT x.seed FROM (SELECT GREATEST("
      " COALESCE((SELECT IF(v < " SEQ_RETIRED ", v, 0) FROM @S"
      " WHERE id = 1), 0),"
      " COALESCE((SELECT MAX(fence) FROM @T), 0),"
      " COALESCE((SELECT MAX(fence) FROM @H), 0)) + 1 AS seed) x"
      " WHERE x.seed > COALESCE((SELECT MAX(id) FROM @F), 0)",
      false },
    { "seed retire", "UPDATE @S SET v = " SEQ_RETIRED " WHERE id = 1", false },
    { "seed commit", "COMMIT", false },
};

/* Autocommit off: each operation's first statement opens its transaction
 * and the operation ends it, saving a round trip. */
const struct mysql_sql mysql_sql_session[] = {
    { "session isolation",
      "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", false },
    { "session settings",
      "SET time_zone = '+00:00', autocommit = 0,"
      " innodb_lock_wait_timeout = 1",
      false },
};

const struct mysql_sql mysql_sql_clock = { "clock", "SELECT " NOW_MS, true };

/* MariaDB only: a lockd stopped in mid-transaction must not hold the
 * fence row for long. Plain MySQL has no such variable. */
const struct mysql_sql mysql_sql_session_idle = {
    "session idle timeout", "SET idle_transaction_timeout = 2", false
};

_Static_assert(LOCK_HOLDS_MAX == 1000000, "HOLDS_MAX");
_Static_assert(LOCK_MULTI_MAX == 64, "KEYS_MAX and STRIPES_MAX");
_Static_assert(ARRAY_LEN(mysql_sql_schema) == MYSQL_SQL_SCHEMA_N,
               "MYSQL_SQL_SCHEMA_N");
_Static_assert(ARRAY_LEN(mysql_sql_probe) == MYSQL_SQL_PROBE_N,
               "MYSQL_SQL_PROBE_N");
_Static_assert(ARRAY_LEN(mysql_sql_seed) == MYSQL_SQL_SEED_N,
               "MYSQL_SQL_SEED_N");
_Static_assert(ARRAY_LEN(mysql_sql_session) == MYSQL_SQL_SESSION_N,
               "MYSQL_SQL_SESSION_N");

/* The table-name suffix a placeholder "@c" stands for; NULL when "@c" is
 * not a placeholder. */
static const char *mysql_sql_suffix(char c)
{
    switch (c) {
    case 'T':
        return ""; /* the keys */
    case 'H':
        return "_holders";
    case 'S':
        return "_seq";
    case 'E':
        return "_events";
    case 'F':
        return "_fence";
    default:
        return NULL;
    }
}

char *mysql_sql_expand(const char *tmpl, const char *table)
{
    size_t tl = strlen(table), n = 0;
    const char *suffix;
    char *out, *p;

    for (const char *s = tmpl; *s != '\0'; s++)
        n += s[0] == '@' && mysql_sql_suffix(s[1]) != NULL ? tl + 10 : 1;
    out = malloc(n + 1);
    if (out == NULL)
        return NULL;
    p = out;
    for (const char *s = tmpl; *s != '\0'; s++) {
        suffix = s[0] == '@' ? mysql_sql_suffix(s[1]) : NULL;
        if (suffix == NULL) {
            *p++ = *s;
            continue;
        }
        *p++ = '`';
        memcpy(p, table, tl);
        p += tl;
        memcpy(p, suffix, strlen(suffix));
        p += strlen(suffix);
        *p++ = '`';
        s++;
    }
    *p = '\0';
    return out;
}

int mysql_sql_expand_list(const struct mysql_sql *list,
                          size_t n,
                          const char *table,
                          char **out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = mysql_sql_expand(list[i].text, table);
        if (out[i] == NULL)
            return -1;
    }
    return 0;
}
