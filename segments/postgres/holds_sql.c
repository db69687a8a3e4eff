/* holds_sql.c -- the reservations' schema on PostgreSQL (migration 3): the holds table
 * and the PL/pgSQL functions each step of a reservation is, one statement each. */
#include "segments/postgres/holds.h"
#include "segments/postgres/holds_sql.h"

/* The table: one row per reservation id (a reset's old ones stay, void by their epoch,
 * until purged a day after their expiry). `attempt`: the place that wrote the row;
 * `confirmed_by`: the confirm that sold it. Only 'held' rows hold units.
 *
 * The functions return the columns holds.h decodes (o_code = store.h's codes, 7 =
 * ADMIN_CONFLICT). Lock order, in every one of them: the id's advisory lock (place),
 * the hold's row, the SKU's row FOR KEY SHARE (a reset, an adjust or a cancel takes
 * it FOR UPDATE: they wait for each other, never interleave), the segment row, other
 * holds' rows (SKIP LOCKED), the SKU's gen last. The sweep bumps the gens of the SKUs
 * it settled in name order. */
/* Each function reads as its fragments (holds_sql.h) and its own lines, one a line. */
/* clang-format off */
const char *const pgh_schema[] = {
    "CREATE TABLE holds ("
    " hold_id text PRIMARY KEY,"
    " sku text NOT NULL,"
    " seg int NOT NULL,"
    " epoch bigint NOT NULL,"
    " qty bigint NOT NULL CHECK (qty > 0),"
    " expires_at timestamptz NOT NULL,"
    " state text NOT NULL CHECK (state IN"
    " ('held', 'confirmed', 'released', 'expired', 'void')),"
    " attempt text NOT NULL,"
    " confirmed_by text,"
    " created_at timestamptz NOT NULL DEFAULT now())",
    "CREATE INDEX holds_held ON holds (sku, seg, expires_at) WHERE state = 'held'",
    "CREATE INDEX holds_due ON holds (expires_at) WHERE state = 'held'",
    "CREATE INDEX holds_done ON holds (expires_at) WHERE state <> 'held'",

    "CREATE FUNCTION inv_ms(t timestamptz) RETURNS bigint LANGUAGE sql STABLE AS"
    " $$ SELECT (extract(epoch FROM t) * 1000)::bigint $$",

    /* The expired holds of one segment (its row locked by the caller) given back, up
     * to p_limit: their units to stock when of p_epoch, else void. */
    "CREATE FUNCTION inv_hold_settle(p_sku text, p_seg int, p_epoch bigint,"
    " p_limit int) RETURNS int LANGUAGE plpgsql AS $$\n"
    "DECLARE h record; n int := 0;\n"
    "BEGIN\n"
    "  FOR h IN SELECT hold_id, qty, epoch FROM holds WHERE sku = p_sku AND seg = p_seg\n"
    "      AND state = 'held' AND expires_at <= now() LIMIT p_limit\n"
    "      FOR UPDATE SKIP LOCKED LOOP\n"
    "    IF h.epoch = p_epoch THEN\n"
    "      UPDATE segments SET stock = stock + h.qty, version = version + 1\n"
    "        WHERE sku = p_sku AND seg = p_seg;\n"
    "      UPDATE holds SET state = 'expired' WHERE hold_id = h.hold_id;\n"
    "      n := n + 1;\n"
    "    ELSE\n"
    "      UPDATE holds SET state = 'void' WHERE hold_id = h.hold_id;\n"
    "    END IF;\n"
    "  END LOOP;\n"
    "  RETURN n;\n"
    "END $$",

    /* The place: the segments walked from p_start as an order walks them. A segment
     * whose lock is held (row: its row locked by a holder's transaction; lease: an
     * unexpired lease) is BUSY and passed; mode atomic and optimistic wait for the
     * row (a statement's lock); the first that holds p_qty takes the hold. */
    PGH_SQL_PLACE_SIG ") LANGUAGE plpgsql AS $$\n"
    PGH_SQL_PLACE_DECLARE
    "BEGIN\n"
    PGH_SQL_OUT_INIT("p_sku")
    PGH_SQL_PLACE_FIND
    PGH_SQL_PLACE_FOUND_END
    PGH_SQL_PLACE_WALK
    "    IF st < p_qty THEN total := total + st; CONTINUE; END IF;\n"
    "    x := date_trunc('milliseconds', now()) + p_ttl * interval '1 millisecond';\n"
    PGH_SQL_PLACE_TAKE
    "    INSERT INTO holds (hold_id, sku, seg, epoch, qty, expires_at, state, attempt)\n"
    "      VALUES (p_id, p_sku, i, k.epoch, p_qty, x, 'held', p_attempt)\n"
    PGH_SQL_PLACE_UPSERT ";\n"
    "    o_code := 0; o_state := 'held'; o_seg := i; o_qty := p_qty;\n"
    "    o_expires := inv_ms(x);\n"
    "    EXIT;\n"
    "  END LOOP;\n"
    "  IF o_seg < 0 THEN\n"
    "    o_stock := total; o_code := CASE WHEN busy THEN 1 ELSE 2 END;\n"
    "  END IF;\n"
    PGH_SQL_PLACE_END,

    /* A step by id: 'confirm', 'release' or 'read'. An expired hold is settled first
     * (a release waits for its segment's row; a confirm or read passes a locked row
     * by and answers 'expired' all the same, the sweep giving the units back). */
    PGH_SQL_STEP_SIG ") LANGUAGE plpgsql AS $$\n"
    PGH_SQL_STEP_DECLARE
    "BEGIN\n"
    PGH_SQL_OUT_INIT("''")
    PGH_SQL_STEP_FIND
    PGH_SQL_STEP_EPOCH
    "    PERFORM 1 FROM segments WHERE sku = h.sku AND seg = h.seg FOR UPDATE;\n"
    "  ELSE\n"
    "    PERFORM 1 FROM segments WHERE sku = h.sku AND seg = h.seg\n"
    "      FOR UPDATE SKIP LOCKED;\n"
    "  END IF;\n"
    "  got := FOUND;\n"
    PGH_SQL_STEP_EXPIRED
    "      UPDATE segments SET stock = stock + h.qty, version = version + 1\n"
    "        WHERE sku = h.sku AND seg = h.seg;\n"
    PGH_SQL_STEP_SETTLED
    "      UPDATE segments SET stock = stock + h.qty, version = version + 1\n"
    "        WHERE sku = h.sku AND seg = h.seg;\n"
    PGH_SQL_STEP_RELEASED
    "    rec := format('{\"order_id\":\"%s\",\"sku\":\"%s\",\"qty\":%s,\"segment\":%s,'\n"
    "      '\"segments\":[{\"segment\":%s,\"qty\":%s}],\"status\":\"confirmed\"}',\n"
    "      p_id, h.sku, h.qty, h.seg, h.seg, h.qty);\n"
    PGH_SQL_STEP_CONFIRM("h.seg"),

    /* The sweep: up to p_limit due holds settled (a locked segment waits for the next
     * look; a reset's old holds go void), then the rows finished a day ago purged. */
    "CREATE FUNCTION inv_holds_sweep(p_limit int) RETURNS int LANGUAGE plpgsql AS $$\n"
    "DECLARE h record; e bigint; n int := 0; bumped text[] := '{}'; s text;\n"
    "BEGIN\n"
    "  FOR h IN SELECT hold_id, sku, seg, epoch, qty FROM holds WHERE state = 'held'\n"
    "      AND expires_at <= now() ORDER BY expires_at LIMIT p_limit\n"
    "      FOR UPDATE SKIP LOCKED LOOP\n"
    PGH_SQL_SWEEP_EPOCH
    "    PERFORM 1 FROM segments WHERE sku = h.sku AND seg = h.seg\n"
    "      FOR UPDATE SKIP LOCKED;\n"
    "    CONTINUE WHEN NOT FOUND;\n"
    "    UPDATE segments SET stock = stock + h.qty, version = version + 1\n"
    "      WHERE sku = h.sku AND seg = h.seg;\n"
    PGH_SQL_SWEEP_END,
    NULL,
};
/* clang-format on */
