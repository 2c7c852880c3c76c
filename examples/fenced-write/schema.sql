-- examples/fenced-write/schema.sql - a table whose rows remember the fence
-- of the last lock holder that wrote them (MySQL 5.7+ / MariaDB 10.3+).
--
--   mysql app < examples/fenced-write/schema.sql
--
-- lockd's fences grow with every grant of a key and stay below 2^53, so a
-- BIGINT holds them. A write is accepted only with a fence above the one
-- stored (write.sh: ... WHERE id = ? AND fence < ?): a holder whose lock
-- expired, and was granted to someone else since, can no longer write.

CREATE TABLE IF NOT EXISTS documents (
    id         BIGINT       NOT NULL PRIMARY KEY,
    body       TEXT         NOT NULL,
    fence      BIGINT       NOT NULL DEFAULT 0,  -- 0: never written under a lock
    updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB;

-- One row to write to; write.sh updates rows, it does not create them.
INSERT IGNORE INTO documents (id, body) VALUES (1, 'nobody has written this yet');
