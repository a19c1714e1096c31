-- Issue 12: migration 0016 looked the batch's apps up with a statement planned afresh on
-- every call (EXECUTE), so that no plan cached on an empty table could scan an app's whole
-- history. That planning cost about 110 us a call, a fifth of the function's time for a
-- delivery of one app (pg_stat_statements, one sender). Here each app is looked up by two
-- plain statements: `app = $1 AND state = 'queued'` (and 'running') is an equality on the
-- whole key of a unique partial index, which the planner reads whatever the table's size,
-- so their cached plans are kept and stay right (the UPDATE by app that 0015 had was not
-- such a lookup). The rules are unchanged.

CREATE OR REPLACE FUNCTION pier_record_deliveries(
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
    gone     uuid;
    slot     int;
    found_at record;
    -- Per app of this batch: its queued and its running deployment (id, claimed and
    -- resolved digest), read once, then kept up to date by the batch itself.
    seen     text[] := '{}';
    q_id     uuid[] := '{}';
    q_claim  text[] := '{}';
    q_res    text[] := '{}';
    r_id     uuid[] := '{}';
    r_claim  text[] := '{}';
    r_res    text[] := '{}';
BEGIN
    -- The aggregate consumes the sorted subquery's rows in order: locks go key by key.
    PERFORM count(pg_advisory_xact_lock(k)) FROM (
        SELECT DISTINCT hashtext('pier:app:' || a) AS k FROM unnest(w_app) AS a
        ORDER BY k) AS keys;

    -- The batch's apps, under their locks: each one's queued and running deployment, read
    -- once, by two statements whose cached plans cannot go stale. Each is an equality on
    -- the whole key of a unique partial index (one queued, one running per app), so its
    -- generic plan, made at a connection's first calls even on an empty table, reads that
    -- index: at most one row, however long the app's history grows.
    FOR k IN 1 .. nw LOOP
        CONTINUE WHEN w_app[k] = ANY (seen);
        seen := seen || w_app[k];
        slot := cardinality(seen);
        q_id[slot] := NULL; q_claim[slot] := NULL; q_res[slot] := NULL;
        r_id[slot] := NULL; r_claim[slot] := NULL; r_res[slot] := NULL;
        SELECT id, claimed_digest, resolved_digest INTO found_at
        FROM deployments WHERE app = w_app[k] AND state = 'queued';
        IF FOUND THEN
            q_id[slot] := found_at.id;
            q_claim[slot] := found_at.claimed_digest;
            q_res[slot] := found_at.resolved_digest;
        END IF;
        SELECT id, claimed_digest, resolved_digest INTO found_at
        FROM deployments WHERE app = w_app[k] AND state = 'running';
        IF FOUND THEN
            r_id[slot] := found_at.id;
            r_claim[slot] := found_at.claimed_digest;
            r_res[slot] := found_at.resolved_digest;
        END IF;
    END LOOP;

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
            -- Every app of the batch has its slot from the lookup above.
            slot := array_position(seen, w_app[j]);
            existing := NULL;
            IF w_digest[j] IS NOT NULL THEN
                IF q_id[slot] IS NOT NULL
                   AND (q_claim[slot] = w_digest[j] OR q_res[slot] = w_digest[j]) THEN
                    existing := q_id[slot];
                ELSIF r_id[slot] IS NOT NULL
                   AND (r_claim[slot] = w_digest[j] OR r_res[slot] = w_digest[j]) THEN
                    existing := r_id[slot];
                END IF;
            END IF;
            IF existing IS NOT NULL THEN
                deps := deps || jsonb_build_array(jsonb_build_object(
                    'result', 'already_pending', 'id', existing, 'app', w_app[j]));
            ELSE
                nid := gen_random_uuid();
                sup := '[]';
                IF q_id[slot] IS NOT NULL THEN
                    -- By key. A worker may have claimed it meanwhile: then it runs, and
                    -- it is not superseded.
                    gone := NULL;
                    UPDATE deployments
                    SET state = 'superseded', superseded_by = nid, finished_at = now(),
                        updated_at = now(),
                        outcome = 'superseded by a newer deployment before it started'
                    WHERE id = q_id[slot] AND state = 'queued'
                    RETURNING id INTO gone;
                    IF gone IS NOT NULL THEN
                        sup := jsonb_build_array(gone);
                    END IF;
                END IF;
                INSERT INTO deployments
                    (id, app, trigger, delivery_id, image, requested_tag, claimed_digest,
                     pinned)
                VALUES (nid, w_app[j], w_trigger[j], did, w_image[j], w_tag[j], w_digest[j],
                        w_pinned[j]);
                q_id[slot] := nid;
                q_claim[slot] := w_digest[j];
                q_res[slot] := NULL;
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
