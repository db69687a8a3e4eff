/* holds_parts_sql.c -- migration 5: reservations that span segments on PostgreSQL (the
 * holds table's parts and the functions of holds_sql.c that now take them). */
#include "segments/postgres/holds.h"
#include "segments/postgres/holds_sql.h"

/* A hold of one segment keeps part_segs/part_qtys NULL (its seg and qty say it all);
 * one of several lists its parts by segment there, seg = the first part's and qty =
 * their sum. Every step treats a hold's parts as one: all taken in the place's
 * transaction, all sold, returned or settled in one step's. Lock order as migration
 * 3's, the parts' segment rows in segment order (or without waiting: SKIP LOCKED, and a
 * hold whose part a holder locks is left for a later look). */
/* Each function reads as its fragments (holds_sql.h) and its own lines, one a line. */
/* clang-format off */
const char *const pgh_schema_parts[] = {
    "ALTER TABLE holds ADD COLUMN part_segs int[], ADD COLUMN part_qtys bigint[]",

    /* "seg:qty,..." by segment: '' for a hold of one segment. */
    "CREATE FUNCTION inv_hold_parts(p_segs int[], p_qtys bigint[]) RETURNS text"
    " LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce((SELECT string_agg(u_seg || ':' ||"
    " u_q, ',' ORDER BY u_seg) FROM unnest(p_segs, p_qtys) AS p(u_seg, u_q)), '') $$",

    /* As migration 3's, a hold of several parts found by any of them; its other
     * parts' rows taken without waiting (the caller holds p_seg's). */
    "CREATE OR REPLACE FUNCTION inv_hold_settle(p_sku text, p_seg int, p_epoch bigint,"
    " p_limit int) RETURNS int LANGUAGE plpgsql AS $$\n"
    "DECLARE h record; n int := 0; m int;\n"
    "BEGIN\n"
    "  FOR h IN SELECT hold_id, qty, epoch, part_segs, part_qtys FROM holds\n"
    "      WHERE sku = p_sku AND (seg = p_seg OR p_seg = ANY (part_segs))\n"
    "      AND state = 'held' AND expires_at <= now() LIMIT p_limit\n"
    "      FOR UPDATE SKIP LOCKED LOOP\n"
    "    IF h.epoch <> p_epoch THEN\n"
    "      UPDATE holds SET state = 'void' WHERE hold_id = h.hold_id;\n"
    "      CONTINUE;\n"
    "    END IF;\n"
    "    IF h.part_segs IS NULL THEN\n"
    "      UPDATE segments SET stock = stock + h.qty, version = version + 1\n"
    "        WHERE sku = p_sku AND seg = p_seg;\n"
    "    ELSE\n"
    "      SELECT count(*) INTO m FROM (SELECT 1 FROM segments WHERE sku = p_sku\n"
    "        AND seg = ANY (h.part_segs) ORDER BY seg FOR UPDATE SKIP LOCKED) l;\n"
    "      CONTINUE WHEN m < cardinality(h.part_segs);\n"
    "      UPDATE segments s SET stock = s.stock + p.u_q, version = s.version + 1\n"
    "        FROM unnest(h.part_segs, h.part_qtys) AS p(u_seg, u_q)\n"
    "        WHERE s.sku = p_sku AND s.seg = p.u_seg;\n"
    "    END IF;\n"
    "    UPDATE holds SET state = 'expired' WHERE hold_id = h.hold_id;\n"
    "    n := n + 1;\n"
    "  END LOOP;\n"
    "  RETURN n;\n"
    "END $$",

    /* The place: as migration 3's, and when no segment walked holds p_qty but the
     * free ones walked (their rows locked by this transaction, or waited for) together
     * do, parts from them in the walk's order, all in this transaction. o_parts: the
     * parts ('' for one segment). */
    "DROP FUNCTION inv_hold_place(text, text, bigint, int, int, text)",
    PGH_SQL_PLACE_SIG ", OUT o_parts text) LANGUAGE plpgsql AS $$\n"
    PGH_SQL_PLACE_DECLARE
    "  av_seg int[] := '{}'; av_st bigint[] := '{}'; avail bigint := 0;\n"
    "  want bigint; take bigint; ps int[] := '{}'; pq bigint[] := '{}';\n"
    "BEGIN\n"
    PGH_SQL_OUT_INIT("p_sku")
    "  o_parts := '';\n"
    PGH_SQL_PLACE_FIND
    "      o_parts := inv_hold_parts(h.part_segs, h.part_qtys);\n"
    PGH_SQL_PLACE_FOUND_END
    "  x := date_trunc('milliseconds', now()) + p_ttl * interval '1 millisecond';\n"
    PGH_SQL_PLACE_WALK
    "    IF st < p_qty THEN\n"
    "      total := total + st;\n"
    "      IF st > 0 THEN\n"
    "        av_seg := av_seg || i; av_st := av_st || st; avail := avail + st;\n"
    "      END IF;\n"
    "      CONTINUE;\n"
    "    END IF;\n"
    PGH_SQL_PLACE_TAKE
    "    ps := ARRAY[i]; pq := ARRAY[p_qty];\n"
    "    EXIT;\n"
    "  END LOOP;\n"
    "  IF cardinality(ps) = 0 AND avail >= p_qty THEN\n"
    "    want := p_qty;\n"
    "    FOR j IN 1 .. cardinality(av_seg) LOOP\n"
    "      EXIT WHEN want = 0;\n"
    "      take := least(want, av_st[j]);\n"
    "      want := want - take;\n"
    "      ps := ps || av_seg[j]; pq := pq || take;\n"
    "    END LOOP;\n"
    "    SELECT array_agg(u_seg ORDER BY u_seg), array_agg(u_q ORDER BY u_seg)\n"
    "      INTO ps, pq FROM unnest(ps, pq) AS p(u_seg, u_q);\n"
    "    UPDATE segments s SET stock = s.stock - p.u_q, version = s.version + 1\n"
    "      FROM unnest(ps, pq) AS p(u_seg, u_q) WHERE s.sku = p_sku AND s.seg = "
    "p.u_seg;\n"
    "    o_stock := avail - p_qty;\n"
    "    o_parts := inv_hold_parts(ps, pq);\n"
    "  END IF;\n"
    "  IF cardinality(ps) > 0 THEN\n"
    "    INSERT INTO holds (hold_id, sku, seg, epoch, qty, expires_at, state, attempt,\n"
    "      part_segs, part_qtys)\n"
    "      VALUES (p_id, p_sku, ps[1], k.epoch, p_qty, x, 'held', p_attempt,\n"
    "      CASE WHEN cardinality(ps) > 1 THEN ps END,\n"
    "      CASE WHEN cardinality(ps) > 1 THEN pq END)\n"
    PGH_SQL_PLACE_UPSERT
    ", part_segs = excluded.part_segs,\n"
    "      part_qtys = excluded.part_qtys;\n"
    "    o_code := 0; o_state := 'held'; o_seg := ps[1]; o_qty := p_qty;\n"
    "    o_expires := inv_ms(x);\n"
    "  ELSE\n"
    "    o_stock := total; o_code := CASE WHEN busy THEN 1 ELSE 2 END;\n"
    "  END IF;\n"
    PGH_SQL_PLACE_END,

    /* A step by id, as migration 3's, on every part: a release waits for the parts'
     * rows (in segment order); a confirm or read takes them without waiting, and an
     * expired hold whose rows it did not get answers 'expired' all the same (the
     * sweep gives the units back). */
    "DROP FUNCTION inv_hold_step(text, text, text)",
    PGH_SQL_STEP_SIG ", OUT o_parts text) LANGUAGE plpgsql AS $$\n"
    PGH_SQL_STEP_DECLARE
    "  segs int[]; qs bigint[];\n"
    "BEGIN\n"
    PGH_SQL_OUT_INIT("''")
    "  o_parts := '';\n"
    PGH_SQL_STEP_FIND
    "  o_parts := inv_hold_parts(h.part_segs, h.part_qtys);\n"
    "  segs := coalesce(h.part_segs, ARRAY[h.seg]);\n"
    "  qs := coalesce(h.part_qtys, ARRAY[h.qty]);\n"
    PGH_SQL_STEP_EPOCH
    "    PERFORM 1 FROM segments WHERE sku = h.sku AND seg = ANY (segs) ORDER BY seg\n"
    "      FOR UPDATE;\n"
    "    got := FOUND;\n"
    "  ELSE\n"
    "    SELECT count(*) = cardinality(segs) INTO got FROM (SELECT 1 FROM segments\n"
    "      WHERE sku = h.sku AND seg = ANY (segs) ORDER BY seg FOR UPDATE SKIP LOCKED) "
    "l;\n"
    "  END IF;\n"
    PGH_SQL_STEP_EXPIRED
    "      UPDATE segments s SET stock = s.stock + p.u_q, version = s.version + 1\n"
    "        FROM unnest(segs, qs) AS p(u_seg, u_q)\n"
    "        WHERE s.sku = h.sku AND s.seg = p.u_seg;\n"
    PGH_SQL_STEP_SETTLED
    "      UPDATE segments s SET stock = s.stock + p.u_q, version = s.version + 1\n"
    "        FROM unnest(segs, qs) AS p(u_seg, u_q)\n"
    "        WHERE s.sku = h.sku AND s.seg = p.u_seg;\n"
    PGH_SQL_STEP_RELEASED
    "    rec := format('{\"order_id\":\"%s\",\"sku\":\"%s\",\"qty\":%s,\"segment\":%s,'\n"
    "      '\"segments\":[%s],\"status\":\"confirmed\"}', p_id, h.sku, h.qty, segs[1],\n"
    "      (SELECT string_agg(format('{\"segment\":%s,\"qty\":%s}', u_seg, u_q), ','\n"
    "      ORDER BY u_seg) FROM unnest(segs, qs) AS p(u_seg, u_q)));\n"
    PGH_SQL_STEP_CONFIRM("segs[1]"),

    /* The sweep, as migration 3's, every part of a hold given back at once. */
    "CREATE OR REPLACE FUNCTION inv_holds_sweep(p_limit int) RETURNS int"
    " LANGUAGE plpgsql AS $$\n"
    "DECLARE h record; e bigint; n int := 0; m int; bumped text[] := '{}'; s text;\n"
    "  segs int[]; qs bigint[];\n"
    "BEGIN\n"
    "  FOR h IN SELECT hold_id, sku, seg, epoch, qty, part_segs, part_qtys FROM holds\n"
    "      WHERE state = 'held' AND expires_at <= now() ORDER BY expires_at\n"
    "      LIMIT p_limit FOR UPDATE SKIP LOCKED LOOP\n"
    PGH_SQL_SWEEP_EPOCH
    "    segs := coalesce(h.part_segs, ARRAY[h.seg]);\n"
    "    qs := coalesce(h.part_qtys, ARRAY[h.qty]);\n"
    "    SELECT count(*) INTO m FROM (SELECT 1 FROM segments WHERE sku = h.sku\n"
    "      AND seg = ANY (segs) ORDER BY seg FOR UPDATE SKIP LOCKED) l;\n"
    "    CONTINUE WHEN m < cardinality(segs);\n"
    "    UPDATE segments g SET stock = g.stock + p.u_q, version = g.version + 1\n"
    "      FROM unnest(segs, qs) AS p(u_seg, u_q) WHERE g.sku = h.sku AND g.seg = "
    "p.u_seg;\n"
    PGH_SQL_SWEEP_END,
    NULL,
};
/* clang-format on */
