/* holds_sql.h -- the PL/pgSQL that migration 3 (holds_sql.c) and migration 5
 * (holds_parts_sql.c) share, written once as string-literal fragments.
 *
 * Contract: each fragment is a run of text that both migrations' functions hold
 * word for word; a migration is its fragments and its own lines concatenated by the
 * compiler. A shipped migration's text never changes (schema.c), so an edit here is
 * wrong unless it leaves both migrations' strings byte for byte as they were: a new
 * behaviour is a new migration with its own text. Internal to holds_sql.c and
 * holds_parts_sql.c. */
#ifndef SEG_POSTGRES_HOLDS_SQL_H
#define SEG_POSTGRES_HOLDS_SQL_H

/* Every place's and step's OUT columns set to "nothing yet", o_sku to `sku`. */
#define PGH_SQL_OUT_INIT(sku)                                                            \
    "  o_state := ''; o_qty := 0; o_expires := 0; o_record := ''; o_settled := 0;\n"     \
    "  o_sku := " sku                                                                    \
    "; o_seg := -1; o_epoch := 0; o_stock := 0; o_replicated := false;\n"

/* ---- inv_hold_place ---------------------------------------------------------------- */

/* The head up to the last OUT column of migration 3 (5 adds o_parts). */
#define PGH_SQL_PLACE_SIG                                                                \
    "CREATE FUNCTION inv_hold_place(p_sku text, p_id text, p_qty bigint, p_ttl int,"     \
    " p_start int, p_attempt text, OUT o_code int, OUT o_state text, OUT o_qty bigint,"  \
    " OUT o_expires bigint, OUT o_record text, OUT o_settled int, OUT o_sku text,"       \
    " OUT o_seg int, OUT o_epoch bigint, OUT o_stock bigint, OUT o_replicated boolean"

#define PGH_SQL_PLACE_DECLARE                                                            \
    "DECLARE k record; h record; i int; n int; st bigint; tok text; til timestamptz;\n"  \
    "  total bigint := 0; busy boolean := false; waits boolean; x timestamptz;\n"

/* The id's lock, the SKU, and an earlier hold of the id: on to this attempt's own
 * answer (o_code 0) or another's (3). */
#define PGH_SQL_PLACE_FIND                                                               \
    "  PERFORM pg_advisory_xact_lock(7236012, hashtext(p_id));\n"                        \
    "  SELECT epoch, segments, mode, lock, replicated INTO k FROM skus\n"                \
    "    WHERE sku = p_sku FOR KEY SHARE;\n"                                             \
    "  IF NOT FOUND THEN o_code := 4; RETURN; END IF;\n"                                 \
    "  o_epoch := k.epoch; o_replicated := k.replicated;\n"                              \
    "  SELECT * INTO h FROM holds WHERE hold_id = p_id;\n"                               \
    "  IF FOUND AND h.state <> 'void' AND (h.sku <> p_sku OR h.epoch = k.epoch) THEN\n"  \
    "    o_sku := h.sku; o_seg := h.seg; o_epoch := h.epoch; o_qty := h.qty;\n"          \
    "    o_expires := inv_ms(h.expires_at);\n"                                           \
    "    IF h.attempt = p_attempt THEN\n" /* this attempt's earlier run */               \
    "      o_code := 0; o_state := h.state;\n"

/* The rest of an earlier hold's answer; an order of the id refuses; the scheme. */
#define PGH_SQL_PLACE_FOUND_END                                                          \
    "      SELECT stock INTO o_stock FROM segments WHERE sku = h.sku AND seg = h.seg;\n" \
    "    ELSE\n"                                                                         \
    "      o_code := 3;\n"                                                               \
    "    END IF;\n"                                                                      \
    "    RETURN;\n"                                                                      \
    "  END IF;\n"                                                                        \
    "  IF EXISTS (SELECT 1 FROM orders WHERE order_id = p_id) THEN\n"                    \
    "    o_code := 7; RETURN;\n"                                                         \
    "  END IF;\n"                                                                        \
    "  waits := k.mode = 'atomic' OR k.lock = 'optimistic';\n"

/* The walk from p_start up to segment i's stock `st` (its row taken or passed by as
 * the scheme says, its expired holds settled). */
#define PGH_SQL_PLACE_WALK                                                               \
    "  FOR j IN 0 .. k.segments - 1 LOOP\n"                                              \
    "    i := (p_start + j) % k.segments;\n"                                             \
    "    IF waits THEN\n"                                                                \
    "      SELECT stock, lease_token, lease_until INTO st, tok, til FROM segments\n"     \
    "        WHERE sku = p_sku AND seg = i FOR UPDATE;\n"                                \
    "      CONTINUE WHEN NOT FOUND;\n"                                                   \
    "    ELSE\n"                                                                         \
    "      SELECT stock, lease_token, lease_until INTO st, tok, til FROM segments\n"     \
    "        WHERE sku = p_sku AND seg = i FOR UPDATE SKIP LOCKED;\n"                    \
    "      IF NOT FOUND THEN busy := true; CONTINUE; END IF;\n"                          \
    "      IF k.lock = 'lease' AND tok IS NOT NULL AND til > now() THEN\n"               \
    "        busy := true; total := total + st; CONTINUE;\n"                             \
    "      END IF;\n"                                                                    \
    "    END IF;\n"                                                                      \
    "    n := inv_hold_settle(p_sku, i, k.epoch, 16);\n"                                 \
    "    IF n > 0 THEN\n"                                                                \
    "      o_settled := o_settled + n;\n"                                                \
    "      SELECT stock INTO st FROM segments WHERE sku = p_sku AND seg = i;\n"          \
    "    END IF;\n"

/* Segment i holds p_qty: take it there. */
#define PGH_SQL_PLACE_TAKE                                                               \
    "    UPDATE segments SET stock = stock - p_qty, version = version + 1\n"             \
    "      WHERE sku = p_sku AND seg = i RETURNING stock INTO o_stock;\n"

/* The hold's row written over a void one of the id; migration 5 sets its parts too. */
#define PGH_SQL_PLACE_UPSERT                                                             \
    "      ON CONFLICT (hold_id) DO UPDATE SET sku = excluded.sku, seg = "               \
    "excluded.seg,\n"                                                                    \
    "      epoch = excluded.epoch, qty = excluded.qty, expires_at = "                    \
    "excluded.expires_at,\n"                                                             \
    "      state = 'held', attempt = excluded.attempt, confirmed_by = NULL,\n"           \
    "      created_at = now()"

#define PGH_SQL_PLACE_END                                                                \
    "  IF o_settled > 0 THEN UPDATE skus SET gen = gen + 1 WHERE sku = p_sku; END IF;\n" \
    "END $$"

/* ---- inv_hold_step ----------------------------------------------------------------- */

#define PGH_SQL_STEP_SIG                                                                 \
    "CREATE FUNCTION inv_hold_step(p_id text, p_act text, p_attempt text,"               \
    " OUT o_code int, OUT o_state text, OUT o_qty bigint, OUT o_expires bigint,"         \
    " OUT o_record text, OUT o_settled int, OUT o_sku text, OUT o_seg int,"              \
    " OUT o_epoch bigint, OUT o_stock bigint, OUT o_replicated boolean"

#define PGH_SQL_STEP_DECLARE                                                             \
    "DECLARE h record; k record; got boolean; back boolean := false; rec text;\n"

/* The hold's row locked and read into the OUT columns. */
#define PGH_SQL_STEP_FIND                                                                \
    "  SELECT * INTO h FROM holds WHERE hold_id = p_id FOR UPDATE;\n"                    \
    "  IF NOT FOUND THEN o_code := 4; RETURN; END IF;\n"                                 \
    "  o_sku := h.sku; o_seg := h.seg; o_epoch := h.epoch; o_qty := h.qty;\n"            \
    "  o_expires := inv_ms(h.expires_at); o_state := h.state;\n"

/* A hold of another epoch, or void, is gone (6); then the release's branch opens. */
#define PGH_SQL_STEP_EPOCH                                                               \
    "  SELECT epoch, replicated INTO k FROM skus WHERE sku = h.sku FOR KEY SHARE;\n"     \
    "  IF NOT FOUND OR k.epoch <> h.epoch OR h.state = 'void' THEN\n"                    \
    "    o_code := 6; RETURN;\n"                                                         \
    "  END IF;\n"                                                                        \
    "  o_replicated := k.replicated;\n"                                                  \
    "  IF p_act = 'release' THEN\n"

#define PGH_SQL_STEP_EXPIRED                                                             \
    "  IF h.state = 'held' AND now() >= h.expires_at THEN\n"                             \
    "    o_state := 'expired';\n"                                                        \
    "    IF got THEN\n"

/* After the expired hold's units went back: settle, then read or release (up to
 * giving the release's units back). */
#define PGH_SQL_STEP_SETTLED                                                             \
    "      UPDATE holds SET state = 'expired' WHERE hold_id = p_id;\n"                   \
    "      o_settled := 1;\n"                                                            \
    "    END IF;\n"                                                                      \
    "  END IF;\n"                                                                        \
    "  IF got THEN\n"                                                                    \
    "    o_settled := o_settled + inv_hold_settle(h.sku, h.seg, h.epoch, 16);\n"         \
    "  END IF;\n"                                                                        \
    "  IF p_act = 'read' THEN\n"                                                         \
    "    o_code := 0;\n"                                                                 \
    "  ELSIF p_act = 'release' THEN\n"                                                   \
    "    IF o_state = 'held' THEN\n"

/* After the release's units went back: released; a confirm's replay or refusal,
 * up to the record of a confirm that sells. */
#define PGH_SQL_STEP_RELEASED                                                            \
    "      UPDATE holds SET state = 'released' WHERE hold_id = p_id;\n"                  \
    "      o_state := 'released'; back := true;\n"                                       \
    "    END IF;\n"                                                                      \
    "    o_code := CASE WHEN o_state = 'confirmed' THEN 7 ELSE 0 END;\n"                 \
    "  ELSIF o_state = 'confirmed' THEN\n"                                               \
    "    SELECT record INTO rec FROM orders WHERE order_id = p_id;\n"                    \
    "    o_record := coalesce(rec, '');\n"                                               \
    "    o_code := CASE WHEN h.confirmed_by = p_attempt THEN 0 ELSE 3 END;\n"            \
    "  ELSIF o_state <> 'held' THEN\n"                                                   \
    "    o_code := 7;\n"                                                                 \
    "  ELSE\n"

/* The confirm's order row `rec` written (at segment `seg`), the hold sold, the gen. */
#define PGH_SQL_STEP_CONFIRM(seg)                                                        \
    "    INSERT INTO orders (order_id, sku, seg, qty, record)\n"                         \
    "      VALUES (p_id, h.sku, " seg                                                    \
    ", h.qty, rec) ON CONFLICT (order_id) DO NOTHING;\n"                                 \
    "    IF NOT FOUND THEN\n"                                                            \
    "      o_code := 7; o_state := 'order';\n"                                           \
    "    ELSE\n"                                                                         \
    "      UPDATE holds SET state = 'confirmed', confirmed_by = p_attempt\n"             \
    "        WHERE hold_id = p_id;\n"                                                    \
    "      o_code := 0; o_state := 'confirmed'; o_record := rec;\n"                      \
    "    END IF;\n"                                                                      \
    "  END IF;\n"                                                                        \
    "  IF o_settled > 0 OR back THEN\n"                                                  \
    "    UPDATE skus SET gen = gen + 1 WHERE sku = h.sku;\n"                             \
    "  END IF;\n"                                                                        \
    "END $$"

/* ---- inv_holds_sweep --------------------------------------------------------------- */

/* A due hold of a reset's epoch, or of a deleted SKU, goes void. */
#define PGH_SQL_SWEEP_EPOCH                                                              \
    "    SELECT epoch INTO e FROM skus WHERE sku = h.sku FOR KEY SHARE;\n"               \
    "    IF NOT FOUND OR e <> h.epoch THEN\n"                                            \
    "      UPDATE holds SET state = 'void' WHERE hold_id = h.hold_id;\n"                 \
    "      CONTINUE;\n"                                                                  \
    "    END IF;\n"

/* After a hold's units went back: expired, the gens bumped in name order, the rows
 * finished a day ago purged. */
#define PGH_SQL_SWEEP_END                                                                \
    "    UPDATE holds SET state = 'expired' WHERE hold_id = h.hold_id;\n"                \
    "    n := n + 1;\n"                                                                  \
    "    IF NOT h.sku = ANY (bumped) THEN bumped := bumped || h.sku; END IF;\n"          \
    "  END LOOP;\n"                                                                      \
    "  FOR s IN SELECT unnest(bumped) ORDER BY 1 LOOP\n"                                 \
    "    UPDATE skus SET gen = gen + 1 WHERE sku = s;\n"                                 \
    "  END LOOP;\n"                                                                      \
    "  DELETE FROM holds WHERE hold_id IN (SELECT hold_id FROM holds\n"                  \
    "    WHERE state <> 'held' AND expires_at < now() - interval '1 day'\n"              \
    "    LIMIT p_limit FOR UPDATE SKIP LOCKED);\n"                                       \
    "  RETURN n;\n"                                                                      \
    "END $$"

#endif
