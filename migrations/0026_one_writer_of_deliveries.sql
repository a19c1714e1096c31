-- Issue 27: a delivery's rules in one place. Until here they were written three times (a
-- plain multi-row INSERT for batches that queue nothing, `pier_record_deliveries` of
-- migrations 0015-0017, and `record_in` in Rust for deliveries with a version guard), and
-- the enqueue rule (the same digest is not queued twice; a newer deployment supersedes the
-- queued one) twice more, in that function and in Rust's `enqueue_locked`. This migration
-- is now the whole of both; the earlier versions above are history only. One shortcut
-- stays outside, for speed: a batch that queues nothing is inserted as `ignored` by
-- store/batch/plain.rs, and only its repeats come here.
--
-- `pier_enqueue` is the one writer of a new deployment, for a delivery and for an operator
-- or a promotion alike. `pier_record_deliveries` is the one writer of deliveries. The one
-- rule computed outside is the version guard's comparison (semver ranges, in Rust's
-- `domain::tags`): the caller passes, per requested deployment, the higher version that
-- holds it back (`w_newer`), read under the same app locks, in the same transaction.

DROP FUNCTION IF EXISTS pier_record_deliveries(
    text[], text[], text[], text[], bytea[], uuid[], int[], text[], text[], text[], text[],
    text[], boolean[]);

-- Queues one deployment of an app whose enqueue lock the caller holds (the advisory lock
-- `hashtext('pier:app:' || app)`, until its transaction ends): without that lock two
-- callers could both see "nothing queued" and race on the one-queued-per-app index.
-- Answers what `Enqueued` (store/deployments.rs) reads.
CREATE FUNCTION pier_enqueue(
    p_app          text,
    p_trigger      text,
    p_delivery     uuid,
    p_image        text,
    p_tag          text,
    p_digest       text,
    p_pinned       boolean,
    p_requested_by text
) RETURNS jsonb AS $$
DECLARE
    q_id    uuid;
    q_claim text;
    q_res   text;
    r_id    uuid;
    r_claim text;
    r_res   text;
    nid     uuid := gen_random_uuid();
    gone    uuid;
    sup     jsonb := '[]';
BEGIN
    -- Per app at most one queued and one running row: each lookup is an equality on the
    -- whole key of a unique partial index, so its cached generic plan reads that index
    -- however long the app's history grows (migration 0017 says why that matters).
    SELECT id, claimed_digest, resolved_digest INTO q_id, q_claim, q_res
    FROM deployments WHERE app = p_app AND state = 'queued';
    SELECT id, claimed_digest, resolved_digest INTO r_id, r_claim, r_res
    FROM deployments WHERE app = p_app AND state = 'running';
    IF p_digest IS NOT NULL THEN
        -- The queued one is the newer: it is the one named.
        IF q_id IS NOT NULL AND (q_claim = p_digest OR q_res = p_digest) THEN
            RETURN jsonb_build_object('result', 'already_pending', 'id', q_id, 'app', p_app);
        ELSIF r_id IS NOT NULL AND (r_claim = p_digest OR r_res = p_digest) THEN
            RETURN jsonb_build_object('result', 'already_pending', 'id', r_id, 'app', p_app);
        END IF;
    END IF;
    IF q_id IS NOT NULL THEN
        -- By key. A worker may have claimed it meanwhile: then it runs, and it is not
        -- superseded.
        UPDATE deployments
        SET state = 'superseded', superseded_by = nid, finished_at = now(),
            updated_at = now(),
            outcome = 'superseded by a newer deployment before it started'
        WHERE id = q_id AND state = 'queued'
        RETURNING id INTO gone;
        IF gone IS NOT NULL THEN
            sup := jsonb_build_array(gone);
        END IF;
    END IF;
    INSERT INTO deployments
        (id, app, trigger, delivery_id, image, requested_tag, claimed_digest, pinned,
         requested_by)
    VALUES (nid, p_app, p_trigger, p_delivery, p_image, p_tag, p_digest, p_pinned,
            p_requested_by);
    RETURN jsonb_build_object('result', 'queued', 'id', nid, 'app', p_app, 'superseded', sup);
END;
$$ LANGUAGE plpgsql;

-- Records a batch of deliveries in arrival order, as if they came one by one: each new
-- delivery is stored once (a repeat of an event key, or of a body where the source stores
-- its hash, is counted on the first row instead), and each deployment it asks for is, in
-- order: not queued if an operator pinned the app; not queued if `w_newer` names a higher
-- version in play; otherwise queued by `pier_enqueue`. Deliveries are `d_*` (1-based);
-- their deployments are `w_*`, ascending by `w_delivery`. Answers one JSON outcome per
-- delivery, in order, as `Answer` (store/deliveries.rs) reads it.
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
    w_pinned        boolean[],
    w_newer         text[]
) RETURNS jsonb AS $$
DECLARE
    nd       int := coalesce(array_length(d_source, 1), 0);
    nw       int := coalesce(array_length(w_app, 1), 0);
    answer   jsonb := '[]';
    did      uuid;
    was_dup  boolean;
    j        int := 1;
    deps     jsonb;
    pinned   jsonb;
    held     jsonb;
    deployed text[];
    held_why text[];
    pin_why  text[];
    why      text[];
    pin      record;
    ids      uuid[];
    stored   uuid[];
BEGIN
    -- The aggregate consumes the sorted subquery's rows in order: locks go key by key, so
    -- two batches never wait on each other's locks in a circle.
    IF nw > 0 THEN
        PERFORM count(pg_advisory_xact_lock(k)) FROM (
            SELECT DISTINCT hashtext('pier:app:' || a) AS k FROM unnest(w_app) AS a
            ORDER BY k) AS keys;
    END IF;

    IF nw = 0 THEN
        -- A batch that queues nothing: its new deliveries in ONE statement, in arrival
        -- order, so that of two with one key the first is stored. (Pier itself sends such
        -- batches to the plain INSERT of store/batch/plain.rs, for speed, and only their
        -- repeats here.)
        ids := ARRAY(SELECT gen_random_uuid() FROM generate_series(1, nd));
        WITH new AS (
            INSERT INTO deliveries
                (id, source, event_key, verdict, reason, events, body_sha256, redelivery_of)
            SELECT i, s, k, 'ignored', r, e::jsonb, b, d
            FROM unnest(ids, d_source, d_event_key, d_reason, d_events, d_body,
                        d_redelivery_of) WITH ORDINALITY AS t(i, s, k, r, e, b, d, n)
            ORDER BY n
            ON CONFLICT DO NOTHING
            RETURNING id)
        SELECT coalesce(array_agg(id), '{}') INTO stored FROM new;
    END IF;

    FOR i IN 1 .. nd LOOP
        IF nw = 0 THEN
            did := CASE WHEN ids[i] = ANY (stored) THEN ids[i] END;
        ELSE
            -- A batch that queues something: one row a statement, whose cached plan is
            -- kept (tests/queue/group_commit.rs counts plannings of such pushes).
            did := NULL;
            INSERT INTO deliveries
                (id, source, event_key, verdict, reason, events, body_sha256, redelivery_of)
            VALUES (gen_random_uuid(), d_source[i], d_event_key[i],
                    CASE WHEN i = ANY (w_delivery) THEN 'queued' ELSE 'ignored' END,
                    d_reason[i], d_events[i]::jsonb, d_body[i], d_redelivery_of[i])
            ON CONFLICT DO NOTHING
            RETURNING id INTO did;
        END IF;
        IF did IS NULL THEN
            -- A repeat is counted on the first row, never stored as a row of its own; its
            -- deployments are not asked for.
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
            WHILE j <= nw AND w_delivery[j] = i LOOP
                j := j + 1;
            END LOOP;
            CONTINUE;
        END IF;

        deps := '[]';
        pinned := '[]';
        held := '[]';
        deployed := '{}';
        held_why := '{}';
        pin_why := '{}';
        WHILE j <= nw AND w_delivery[j] = i LOOP
            -- Under the app's enqueue lock, as the rollback that pins: a push racing a
            -- rollback either sees the pin or is superseded by it.
            SELECT p.app, p.digest, p.pinned_by, p.pinned_at, p.deployment_id INTO pin
            FROM pins p WHERE p.app = w_app[j] AND p.unpinned_at IS NULL
            LIMIT 1;
            IF FOUND THEN
                pinned := pinned || jsonb_build_array(jsonb_build_object(
                    'app', pin.app, 'digest', pin.digest, 'by', pin.pinned_by,
                    'at', pin.pinned_at, 'deployment_id', pin.deployment_id));
                -- Same words as `pinned_reason` in Rust (the hook's answer).
                pin_why := pin_why || format(
                    '%s: pinned to %s by %s at %s; not deployed until unpinned',
                    pin.app, pin.digest, pin.pinned_by,
                    to_char(pin.pinned_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                        || ' UTC');
            ELSIF w_newer[j] IS NOT NULL THEN
                held := held || jsonb_build_array(jsonb_build_object(
                    'app', w_app[j], 'tag', w_tag[j], 'newer', w_newer[j]));
                -- Same words as `HeldBack::reason` in Rust.
                held_why := held_why || format(
                    '%s: %s not deployed, %s is newer (running or queued); '
                        || 'a version range never rolls back',
                    w_app[j], w_tag[j], w_newer[j]);
            ELSE
                deps := deps || jsonb_build_array(pier_enqueue(
                    w_app[j], w_trigger[j], did, w_image[j], w_tag[j], w_digest[j],
                    w_pinned[j], NULL));
                deployed := deployed || w_app[j];
            END IF;
            j := j + 1;
        END LOOP;

        IF cardinality(held_why) > 0 OR cardinality(pin_why) > 0 THEN
            why := held_why || pin_why;
            IF cardinality(deployed) > 0 THEN
                why := ('deploys ' || array_to_string(deployed, ', ')) || why;
            END IF;
            UPDATE deliveries
            SET verdict = CASE WHEN cardinality(deployed) > 0 THEN 'queued'
                               WHEN cardinality(pin_why) > 0 THEN 'pinned'
                               ELSE 'ignored' END,
                reason = array_to_string(why, '; ')
            WHERE id = did;
        END IF;

        answer := answer || jsonb_build_array(jsonb_build_object(
            'outcome', 'recorded', 'delivery_id', did, 'deployments', deps,
            'pinned', pinned, 'held_back', held));
    END LOOP;
    RETURN answer;
END;
$$ LANGUAGE plpgsql;
