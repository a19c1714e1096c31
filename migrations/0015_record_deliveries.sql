-- Issue 12 (ingest speed): a batch of deliveries is recorded by ONE statement, one round
-- trip and one commit, instead of BEGIN, a lock, an insert and three queue statements per
-- deployment, and COMMIT. The rules are the same as the Rust path in
-- src/store/deliveries.rs (`record_in`) and src/store/deployments.rs (`enqueue_locked`),
-- which still records deliveries that carry a version guard (its comparison is Rust's):
--
-- * every app of the batch is locked up front, in key order, with the same advisory key as
--   `lock_app`, so a batch, a manual deploy and a rollback that pins exclude each other and
--   two batches cannot deadlock;
-- * deliveries are recorded in arrival order (index order of the arrays); a repeat (same
--   event key, or same body for sources that store its hash) is counted on the first row;
-- * per wanted deployment: an app with a pin in force is not deployed (the delivery's
--   verdict and reason say so); the same digest already queued or running is not queued
--   again; otherwise the app's queued deployment is superseded by the new one;
-- * the `deployments_notify` trigger wakes the workers at commit, as before.
--
-- Each statement in a volatile plpgsql function takes a fresh snapshot, so the repeat
-- count after a conflicting insert sees the row the conflict waited for, as the two
-- statements of the Rust path do. Arrays are 1-based; `w_delivery[j]` is the index of the
-- delivery that wants deployment j (ascending, in the order the delivery asks).
CREATE FUNCTION pier_record_deliveries(
    d_source        text[],
    d_event_key     text[],
    d_reason        text[],
    d_events        text[],
    d_body          bytea[],
    d_redelivery_of uuid[],
    w_delivery      int[],
    w_app           text[],
    w_trigger       text[],
    w_image         text[],
    w_tag           text[],
    w_digest        text[],
    w_pinned        boolean[]
) RETURNS jsonb AS $$
DECLARE
    answer   jsonb := '[]';
    did      uuid;
    was_dup  boolean;
    j        int := 1;
    nw       int := coalesce(array_length(w_app, 1), 0);
    deps     jsonb;
    held     jsonb;
    deployed text[];
    why      text[];
    pin      record;
    existing uuid;
    nid      uuid;
    sup      jsonb;
BEGIN
    -- The aggregate consumes the sorted subquery's rows in order: locks go key by key.
    PERFORM count(pg_advisory_xact_lock(k)) FROM (
        SELECT DISTINCT hashtext('pier:app:' || a) AS k FROM unnest(w_app) AS a
        ORDER BY k) AS keys;

    FOR i IN 1 .. coalesce(array_length(d_source, 1), 0) LOOP
        did := NULL;
        INSERT INTO deliveries
            (id, source, event_key, verdict, reason, events, body_sha256, redelivery_of)
        VALUES (gen_random_uuid(), d_source[i], d_event_key[i],
                CASE WHEN i = ANY (w_delivery) THEN 'queued' ELSE 'ignored' END,
                d_reason[i], d_events[i]::jsonb, d_body[i], d_redelivery_of[i])
        ON CONFLICT DO NOTHING
        RETURNING id INTO did;

        IF did IS NULL THEN
            -- A repeat is counted on the first row, never stored as a row of its own.
            WITH hit AS (
                SELECT id, (d_event_key[i] IS NOT NULL
                            AND event_key IS NOT DISTINCT FROM d_event_key[i]) AS dup
                FROM deliveries
                WHERE source = d_source[i]
                  AND (event_key = d_event_key[i] OR body_sha256 = d_body[i])
                ORDER BY (event_key IS NOT DISTINCT FROM d_event_key[i]) DESC
                LIMIT 1)
            UPDATE deliveries d
            SET seen_count = seen_count + 1, last_seen_at = now(),
                duplicates = duplicates + hit.dup::int,
                replays = replays + (NOT hit.dup)::int
            FROM hit WHERE d.id = hit.id
            RETURNING d.id, hit.dup INTO STRICT did, was_dup;
            answer := answer || jsonb_build_array(jsonb_build_object(
                'outcome', CASE WHEN was_dup THEN 'duplicate' ELSE 'replay' END,
                'delivery_id', did));
            -- Its deployments are not asked for.
            WHILE j <= nw AND w_delivery[j] = i LOOP
                j := j + 1;
            END LOOP;
            CONTINUE;
        END IF;

        deps := '[]';
        held := '[]';
        deployed := '{}';
        WHILE j <= nw AND w_delivery[j] = i LOOP
            SELECT p.app, p.digest, p.pinned_by, p.pinned_at, p.deployment_id INTO pin
            FROM pins p WHERE p.app = w_app[j] AND p.unpinned_at IS NULL
            LIMIT 1;
            IF FOUND THEN
                held := held || jsonb_build_array(jsonb_build_object(
                    'app', pin.app, 'digest', pin.digest, 'by', pin.pinned_by,
                    'at', pin.pinned_at, 'deployment_id', pin.deployment_id));
                j := j + 1;
                CONTINUE;
            END IF;
            deployed := deployed || w_app[j];
            existing := NULL;
            IF w_digest[j] IS NOT NULL THEN
                -- One probe of each partial unique index (one queued, one running per app).
                SELECT x.id INTO existing FROM (
                    (SELECT id FROM deployments WHERE app = w_app[j] AND state = 'queued'
                       AND (claimed_digest = w_digest[j] OR resolved_digest = w_digest[j]))
                    UNION ALL
                    (SELECT id FROM deployments WHERE app = w_app[j] AND state = 'running'
                       AND (claimed_digest = w_digest[j] OR resolved_digest = w_digest[j]))
                    LIMIT 1) AS x;
            END IF;
            IF existing IS NOT NULL THEN
                deps := deps || jsonb_build_array(jsonb_build_object(
                    'result', 'already_pending', 'id', existing, 'app', w_app[j]));
            ELSE
                nid := gen_random_uuid();
                WITH s AS (
                    UPDATE deployments
                    SET state = 'superseded', superseded_by = nid, finished_at = now(),
                        updated_at = now(),
                        outcome = 'superseded by a newer deployment before it started'
                    WHERE app = w_app[j] AND state = 'queued'
                    RETURNING id)
                SELECT coalesce(jsonb_agg(s.id), '[]') INTO sup FROM s;
                INSERT INTO deployments
                    (id, app, trigger, delivery_id, image, requested_tag, claimed_digest,
                     pinned)
                VALUES (nid, w_app[j], w_trigger[j], did, w_image[j], w_tag[j], w_digest[j],
                        w_pinned[j]);
                deps := deps || jsonb_build_array(jsonb_build_object(
                    'result', 'queued', 'id', nid, 'app', w_app[j], 'superseded', sup));
            END IF;
            j := j + 1;
        END LOOP;

        IF jsonb_array_length(held) > 0 THEN
            -- Same words as `pinned_reason` and `record_in` in Rust.
            SELECT array_agg(format(
                       '%s: pinned to %s by %s at %s; not deployed until unpinned',
                       p->>'app', p->>'digest', p->>'by',
                       to_char((p->>'at')::timestamptz AT TIME ZONE 'UTC',
                               'YYYY-MM-DD HH24:MI:SS') || ' UTC')
                       ORDER BY n)
            INTO why
            FROM jsonb_array_elements(held) WITH ORDINALITY AS e(p, n);
            IF cardinality(deployed) > 0 THEN
                why := ('deploys ' || array_to_string(deployed, ', ')) || why;
            END IF;
            UPDATE deliveries
            SET verdict = CASE WHEN cardinality(deployed) > 0 THEN 'queued' ELSE 'pinned' END,
                reason = array_to_string(why, '; ')
            WHERE id = did;
        END IF;

        answer := answer || jsonb_build_array(jsonb_build_object(
            'outcome', 'recorded', 'delivery_id', did, 'deployments', deps, 'pinned', held));
    END LOOP;
    RETURN answer;
END;
$$ LANGUAGE plpgsql;
