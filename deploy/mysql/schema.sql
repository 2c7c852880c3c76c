-- deploy/mysql/schema.sql - the tables lockd's MySQL/MariaDB backend uses
-- (tests/unit/test_mysql_sql.c checks that lockd creates exactly these).
--
-- lockd creates them itself on its first connection when they are missing
-- (CREATE TABLE IF NOT EXISTS); apply this file by hand when the lockd user
-- may not create tables:
--
--   mariadb lockd < deploy/mysql/schema.sql
--
-- With ?table=NAME in the backend URL the tables are NAME, NAME_holders,
-- NAME_seq, NAME_events and NAME_fence (replace lockd_locks below). Needs InnoDB (row locks,
-- transactions). The lockd user needs SELECT, INSERT, UPDATE, DELETE on
-- them (and CREATE if lockd is to create them).

-- One row per held key (or expired, not yet reaped): its mode and limit,
-- and the expiry of the holder that expires last. Every change to a key's
-- holders locks this row first. A free key has no row: the last holder's
-- release deletes it, and a background reaper deletes expired rows in small
-- batches, so the table holds about as many rows as there are held keys.
-- token, owner and fence are the holder's in rows of lockd before lock
-- kinds (lockd moves live ones to lockd_locks_holders at start); '' and 0
-- in rows lockd makes now. When a table from before lock kinds lacks mode
-- and lim, lockd adds them itself at start (ALTER TABLE) when it may.
CREATE TABLE IF NOT EXISTS lockd_locks (
    lock_key   VARBINARY(512)  NOT NULL,  -- the key, byte for byte
    token      VARBINARY(64)   NOT NULL,  -- '' (older rows: the holder's)
    owner      VARBINARY(128)  NULL,      -- NULL (older rows: the holder's)
    fence      BIGINT UNSIGNED NOT NULL,  -- 0 (older rows: the holder's)
    ttl_ms     BIGINT UNSIGNED NOT NULL,  -- the TTL of the last exclusive grant
    expires_at BIGINT          NOT NULL,  -- unix ms, by the database's clock:
                                          -- the last holder's expiry
    mode       TINYINT UNSIGNED NOT NULL DEFAULT 0, -- 0 exclusive, 1 shared
    lim        INT UNSIGNED    NOT NULL DEFAULT 0,  -- shared: limit, 0 none
    PRIMARY KEY (lock_key),
    KEY expires_at (expires_at)
) ENGINE = InnoDB;

-- One row per holder of a key: one for an exclusive lock, up to the limit
-- for a shared one. Expired rows are deleted by the next operation on the
-- key, or by the reaper.
CREATE TABLE IF NOT EXISTS lockd_locks_holders (
    lock_key   VARBINARY(512)  NOT NULL,  -- the key's row in lockd_locks
    token      VARBINARY(64)   NOT NULL,  -- proof of ownership
    owner      VARBINARY(128)  NULL,      -- informational label
    fence      BIGINT UNSIGNED NOT NULL,  -- from lockd_locks_fence at grant
    ttl_ms     BIGINT UNSIGNED NOT NULL,  -- the TTL of the last grant/renew
    expires_at BIGINT          NOT NULL,  -- unix ms, by the database's clock
    holds      INT UNSIGNED    NOT NULL,  -- re-entries + 1
    idem       VARBINARY(128)  NULL,      -- the grant's Idempotency-Key
    PRIMARY KEY (lock_key, token),
    KEY expires_at (expires_at)
) ENGINE = InnoDB;

-- Two counters, and the stripes (below). Row 1 is the fence sequence of
-- lockd before 0.2 (kept only to upgrade from it: lockd seeds lockd_locks_fence above it at
-- start and then sets it to 2^53 - 1, so an old lockd still running fails
-- instead of handing out a fence from it). Row 2, the event id: bumped
-- inside every releasing transaction, so event ids commit in order,
-- without gaps.
CREATE TABLE IF NOT EXISTS lockd_locks_seq (
    id TINYINT UNSIGNED NOT NULL,
    v  BIGINT UNSIGNED  NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;

-- One row per release, read by every lockd instance (polled every 50 ms)
-- to wake its waiters for that key; rows older than 30-60 s are deleted.
CREATE TABLE IF NOT EXISTS lockd_locks_events (
    id       BIGINT UNSIGNED NOT NULL,  -- from lockd_locks_seq row 2
    lock_key VARBINARY(512)  NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;

-- The fence counter: every grant inserts a row after locking the key's row
-- and takes its AUTO_INCREMENT id as the fence, so a later grant of the
-- same key (which waits for the earlier one's commit) gets a larger one.
-- The AUTO_INCREMENT lock is released at the end of the INSERT, not at
-- commit, so grants of different keys do not queue on it. The counter
-- survives server restarts (MariaDB >= 10.2.4, MySQL 8), and the reaper
-- keeps the highest row anyway; older rows are deleted every second.
CREATE TABLE IF NOT EXISTS lockd_locks_fence (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    PRIMARY KEY (id)
) ENGINE = InnoDB;

INSERT IGNORE INTO lockd_locks_seq (id, v) VALUES (1, 0), (2, 0);
-- Rows 128 to 255: the stripes. An acquire locks its key's stripe row
-- (128 + CRC32(key) % 128) before it inserts the key's row in
-- lockd_locks, so two inserts of one key never run at once: InnoDB's
-- duplicate check on a key row just deleted takes gap locks, which would
-- deadlock them. A multi-key acquire locks the stripe rows of all its keys,
-- by ascending id, before any key row. These rows are never changed or
-- deleted.
INSERT IGNORE INTO lockd_locks_seq (id, v) VALUES
    (128, 0), (129, 0), (130, 0), (131, 0), (132, 0), (133, 0), (134, 0), (135, 0),
    (136, 0), (137, 0), (138, 0), (139, 0), (140, 0), (141, 0), (142, 0), (143, 0),
    (144, 0), (145, 0), (146, 0), (147, 0), (148, 0), (149, 0), (150, 0), (151, 0),
    (152, 0), (153, 0), (154, 0), (155, 0), (156, 0), (157, 0), (158, 0), (159, 0),
    (160, 0), (161, 0), (162, 0), (163, 0), (164, 0), (165, 0), (166, 0), (167, 0),
    (168, 0), (169, 0), (170, 0), (171, 0), (172, 0), (173, 0), (174, 0), (175, 0),
    (176, 0), (177, 0), (178, 0), (179, 0), (180, 0), (181, 0), (182, 0), (183, 0),
    (184, 0), (185, 0), (186, 0), (187, 0), (188, 0), (189, 0), (190, 0), (191, 0),
    (192, 0), (193, 0), (194, 0), (195, 0), (196, 0), (197, 0), (198, 0), (199, 0),
    (200, 0), (201, 0), (202, 0), (203, 0), (204, 0), (205, 0), (206, 0), (207, 0),
    (208, 0), (209, 0), (210, 0), (211, 0), (212, 0), (213, 0), (214, 0), (215, 0),
    (216, 0), (217, 0), (218, 0), (219, 0), (220, 0), (221, 0), (222, 0), (223, 0),
    (224, 0), (225, 0), (226, 0), (227, 0), (228, 0), (229, 0), (230, 0), (231, 0),
    (232, 0), (233, 0), (234, 0), (235, 0), (236, 0), (237, 0), (238, 0), (239, 0),
    (240, 0), (241, 0), (242, 0), (243, 0), (244, 0), (245, 0), (246, 0), (247, 0),
    (248, 0), (249, 0), (250, 0), (251, 0), (252, 0), (253, 0), (254, 0), (255, 0);
-- lockd seeds lockd_locks_fence (above row 1 and above every fence in
-- lockd_locks and lockd_locks_holders) itself at every start; that needs
-- only SELECT, INSERT, UPDATE.

