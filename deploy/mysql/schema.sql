-- deploy/mysql/schema.sql - the tables lockd's MySQL/MariaDB backend uses.
--
-- lockd creates them itself on its first connection when they are missing
-- (CREATE TABLE IF NOT EXISTS); apply this file by hand when the lockd user
-- may not create tables:
--
--   mariadb lockd < deploy/mysql/schema.sql
--
-- With ?table=NAME in the backend URL the tables are NAME and NAME_seq
-- (replace lockd_locks below). Needs InnoDB (row locks, transactions).

-- One row per held (or expired, not yet reaped) lock. A released lock has no
-- row: release deletes it, and a background reaper deletes expired rows in
-- small batches, so the table holds about as many rows as there are locks.
CREATE TABLE IF NOT EXISTS lockd_locks (
    lock_key   VARBINARY(512)  NOT NULL,  -- the key, byte for byte
    token      VARBINARY(64)   NOT NULL,  -- proof of ownership
    owner      VARBINARY(128)  NULL,      -- informational label
    fence      BIGINT UNSIGNED NOT NULL,  -- from lockd_locks_seq at grant
    ttl_ms     BIGINT UNSIGNED NOT NULL,  -- the TTL of the last grant/renew
    expires_at BIGINT          NOT NULL,  -- unix ms, by the database's clock
    PRIMARY KEY (lock_key),
    KEY expires_at (expires_at)
) ENGINE = InnoDB;

-- The fence counter: one row, bumped inside every granting transaction, so
-- every grant of any key gets a fence above all earlier grants. Rows of
-- free keys can therefore be deleted without a fence ever going back.
CREATE TABLE IF NOT EXISTS lockd_locks_seq (
    id TINYINT UNSIGNED NOT NULL,
    v  BIGINT UNSIGNED  NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;

INSERT IGNORE INTO lockd_locks_seq (id, v) VALUES (1, 0);
