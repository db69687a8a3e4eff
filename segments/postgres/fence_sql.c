/* fence_sql.c -- migration 6 of the PostgreSQL store: the lock services' fences
 * (fence.h): a column per segment, the SKU's "fencing", and the functions that
 * register a hold's fence and fence its writes. */
#include "segments/postgres/fence.h"

/* Every function locks the segment rows it reads (FOR UPDATE, in segment order) before
 * it reads the SKU's epoch: a reset locks the SKU's row and then deletes those rows,
 * so it waits for the write or finds it done (the sale then goes with the reset's
 * epoch, as any sale before it). o_code: store.h's (0 OK, 2 SHORT, 3 EXISTS,
 * 4 MISSING, 5 FENCED, 6 STALE). */
const char *const pgf_schema[] = {
    "ALTER TABLE segments ADD COLUMN svc_fence bigint NOT NULL DEFAULT 0",
    "ALTER TABLE skus ADD COLUMN unfenced boolean NOT NULL DEFAULT false",

    "CREATE FUNCTION inv_svc_hold(p_sku text, p_seg int, p_epoch bigint, p_id text,"
    " p_qty bigint, p_fence bigint, OUT o_code int, OUT o_stock bigint,"
    " OUT o_fence bigint, OUT o_record text) LANGUAGE plpgsql AS $$\n"
    "DECLARE st bigint; top bigint; ep bigint;\n"
    "BEGIN\n"
    "  o_stock := 0; o_fence := 0;\n"
    "  SELECT stock, svc_fence INTO st, top FROM segments\n"
    "    WHERE sku = p_sku AND seg = p_seg FOR UPDATE;\n"
    "  SELECT epoch INTO ep FROM skus WHERE sku = p_sku;\n"
    "  IF ep IS DISTINCT FROM p_epoch THEN o_code := 6; RETURN; END IF;\n"
    "  SELECT record INTO o_record FROM orders WHERE order_id = p_id;\n"
    "  IF FOUND THEN o_code := 3; RETURN; END IF;\n"
    "  IF st IS NULL THEN o_code := 4; RETURN; END IF;\n"
    "  o_stock := st;\n"
    "  IF st < p_qty THEN o_code := 2; RETURN; END IF;\n"
    "  IF p_fence = 0 THEN\n"
    "    o_fence := top + 1;\n" /* a service with no fence of its own: issue one */
    "  ELSIF p_fence < top THEN\n"
    "    o_code := 5; RETURN;\n"
    "  ELSE\n"
    "    o_fence := p_fence;\n"
    "  END IF;\n"
    "  UPDATE segments SET svc_fence = o_fence WHERE sku = p_sku AND seg = p_seg;\n"
    "  o_code := 0;\n"
    "END $$",

    "CREATE FUNCTION inv_svc_deduct(p_sku text, p_seg int, p_epoch bigint,"
    " p_fence bigint, p_id text, p_qty bigint, p_record text, OUT o_code int,"
    " OUT o_stock bigint, OUT o_record text) LANGUAGE plpgsql AS $$\n"
    "DECLARE st bigint; top bigint; ep bigint; n int;\n"
    "BEGIN\n"
    "  o_stock := 0;\n"
    "  SELECT stock, svc_fence INTO st, top FROM segments\n"
    "    WHERE sku = p_sku AND seg = p_seg FOR UPDATE;\n"
    "  IF p_fence > 0 AND p_fence < top THEN o_code := 5; RETURN; END IF;\n"
    "  SELECT epoch INTO ep FROM skus WHERE sku = p_sku;\n"
    "  IF ep IS DISTINCT FROM p_epoch THEN o_code := 6; RETURN; END IF;\n"
    "  SELECT record INTO o_record FROM orders WHERE order_id = p_id;\n"
    "  IF FOUND THEN o_code := 3; RETURN; END IF;\n"
    "  IF st IS NULL THEN o_code := 4; RETURN; END IF;\n"
    "  o_stock := st;\n"
    "  IF st < p_qty THEN o_code := 2; RETURN; END IF;\n"
    "  INSERT INTO orders (order_id, sku, seg, qty, record)\n"
    "    VALUES (p_id, p_sku, p_seg, p_qty, p_record) ON CONFLICT DO NOTHING;\n"
    "  GET DIAGNOSTICS n = ROW_COUNT;\n"
    "  IF n = 0 THEN\n" /* recorded meanwhile by another transaction */
    "    SELECT record INTO o_record FROM orders WHERE order_id = p_id;\n"
    "    o_code := 3; RETURN;\n"
    "  END IF;\n"
    "  UPDATE segments SET stock = stock - p_qty, version = version + 1\n"
    "    WHERE sku = p_sku AND seg = p_seg RETURNING stock INTO o_stock;\n"
    "  o_code := 0;\n"
    "END $$",

    /* p_segs ascending; o_stocks[j]: part j's stock left (OK) or held (SHORT). */
    "CREATE FUNCTION inv_svc_deduct_multi(p_sku text, p_segs int[], p_qty bigint[],"
    " p_fence bigint[], p_epoch bigint, p_id text, p_record text, OUT o_code int,"
    " OUT o_stocks bigint[], OUT o_record text) LANGUAGE plpgsql AS $$\n"
    "DECLARE r record; ep bigint; n int := 0; fenced boolean := false;\n"
    "  short boolean := false;\n"
    "BEGIN\n"
    "  o_stocks := '{}';\n"
    "  FOR r IN SELECT s.stock, s.svc_fence, p.q, p.f FROM segments s\n"
    "      JOIN unnest(p_segs, p_qty, p_fence) AS p(seg, q, f) ON s.seg = p.seg\n"
    "      WHERE s.sku = p_sku ORDER BY s.seg FOR UPDATE OF s LOOP\n"
    "    n := n + 1;\n"
    "    fenced := fenced OR (r.f > 0 AND r.f < r.svc_fence);\n"
    "    short := short OR r.stock < r.q;\n"
    "    o_stocks := o_stocks || r.stock;\n"
    "  END LOOP;\n"
    "  IF fenced THEN o_code := 5; RETURN; END IF;\n"
    "  SELECT epoch INTO ep FROM skus WHERE sku = p_sku;\n"
    "  IF ep IS DISTINCT FROM p_epoch OR n <> cardinality(p_segs) THEN\n"
    "    o_code := 6; RETURN;\n"
    "  END IF;\n"
    "  SELECT record INTO o_record FROM orders WHERE order_id = p_id;\n"
    "  IF FOUND THEN o_code := 3; RETURN; END IF;\n"
    "  IF short THEN o_code := 2; RETURN; END IF;\n"
    "  INSERT INTO orders (order_id, sku, seg, qty, record)\n"
    "    SELECT p_id, p_sku, min(s), sum(q), p_record\n"
    "      FROM unnest(p_segs, p_qty) AS p(s, q)\n"
    "    ON CONFLICT DO NOTHING;\n"
    "  GET DIAGNOSTICS n = ROW_COUNT;\n"
    "  IF n = 0 THEN\n"
    "    SELECT record INTO o_record FROM orders WHERE order_id = p_id;\n"
    "    o_code := 3; RETURN;\n"
    "  END IF;\n"
    "  UPDATE segments s SET stock = s.stock - p.q, version = s.version + 1\n"
    "    FROM unnest(p_segs, p_qty) AS p(seg, q) WHERE s.sku = p_sku AND s.seg = p.seg;\n"
    "  SELECT array_agg(s.stock ORDER BY s.seg) INTO o_stocks FROM segments s\n"
    "    WHERE s.sku = p_sku AND s.seg = ANY (p_segs);\n"
    "  o_code := 0;\n"
    "END $$",

    /* A reservation takes no part in a lock service's fences: its place on such a SKU
     * is refused (11, ADMIN_MISMATCH: 409 reservations_unsupported), as on Redis;
     * migration 5's walk runs unchanged for every other SKU. */
    "ALTER FUNCTION inv_hold_place(text, text, bigint, int, int, text)"
    " RENAME TO inv_hold_place_walk",
    "CREATE FUNCTION inv_hold_place(p_sku text, p_id text, p_qty bigint, p_ttl int,"
    " p_start int, p_attempt text, OUT o_code int, OUT o_state text, OUT o_qty bigint,"
    " OUT o_expires bigint, OUT o_record text, OUT o_settled int, OUT o_sku text,"
    " OUT o_seg int, OUT o_epoch bigint, OUT o_stock bigint, OUT o_replicated boolean,"
    " OUT o_parts text) LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  IF EXISTS (SELECT 1 FROM skus WHERE sku = p_sku\n"
    "      AND lock IN ('redlock', 'memcached', 'zookeeper')) THEN\n"
    "    o_code := 11; o_state := ''; o_qty := 0; o_expires := 0; o_record := '';\n"
    "    o_settled := 0; o_sku := p_sku; o_seg := -1; o_epoch := 0; o_stock := 0;\n"
    "    o_replicated := false; o_parts := '';\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  SELECT * INTO o_code, o_state, o_qty, o_expires, o_record, o_settled, o_sku,\n"
    "    o_seg, o_epoch, o_stock, o_replicated, o_parts\n"
    "    FROM inv_hold_place_walk(p_sku, p_id, p_qty, p_ttl, p_start, p_attempt);\n"
    "END $$",
    NULL,
};
