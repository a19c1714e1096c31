-- A batch's pushes for one app in one enqueue. A batch holds its apps' enqueue locks until
-- it commits, and every other delivery for those apps waits for that commit, so the time a
-- batch spends inside `pier_record_deliveries` is taken from every sender of the app. Until
-- here each delivery of the batch was one row statement into `deliveries` and one call of
-- `pier_enqueue`: two index probes, an INSERT of a queued deployment and an UPDATE that
-- superseded the one the call before had just queued (a second row version, eleven index
-- entries, four trigger events), per push. Here the batch's deliveries are one INSERT,
-- each app's pushes one call of `pier_enqueue_many`: two probes, at most one UPDATE (the
-- deployment queued before the batch) and one INSERT that writes every push's deployment
-- in its final state, the newest `queued`, each older one `superseded` by the next. What
-- is stored and answered is what the call-by-call version stored and answered, push by
-- push, in arrival order (`bench/RESULTS.md` has the measurements).
--
-- `pier_enqueue_many` is now the one writer of new deployments; `pier_enqueue` (an
-- operator's deploy, a promotion, a version-guarded push) is its case of one request.
-- `pier_record_deliveries` stays the one writer of deliveries, with the same signature and
-- the same answer.

-- Queues, for ONE app whose enqueue lock the caller holds (the advisory lock
-- `hashtext('pier:app:' || app)`, until its transaction ends), a sequence of requested
-- deployments, in order, exactly as if `pier_enqueue` of migration 0026 were called for
-- each in turn: a request naming the digest of the deployment queued before it (or, failing
-- that, of the running one) is already pending there; any other request is queued and
-- supersedes the deployment queued before it. Answers a JSON array with one `Enqueued`
-- (store/deployments.rs) per request, in order.
--
-- Plans are generic from a connection's first call: `unnest` of an array parameter is
-- estimated from the array's length in a custom plan, so the plan cache would otherwise
-- keep planning the INSERT afresh for batches of each size; the other statements are
-- equalities on the whole key of a unique index, right whatever the table's size.
CREATE FUNCTION pier_enqueue_many(
    p_app          text,
    p_trigger      text[],
    p_delivery     uuid[],
    p_image        text[],
    p_tag          text[],
    p_digest       text[],
    p_pinned       boolean[],
    p_requested_by text[]
) RETURNS jsonb
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    n       int := coalesce(array_length(p_trigger, 1), 0);
    q_id    uuid;
    q_claim text;
    q_res   text;
    r_id    uuid;
    r_claim text;
    r_res   text;
    -- The deployment queued before this call, while this call may still supersede it.
    before  uuid;
    gone    uuid;
    -- Per request: the deployment it queues (NULL: it names one already pending).
    ids     uuid[];
    -- Per request: the deployment it supersedes, or the pending one it names.
    named   uuid[];
    -- The requests that queue, in order: each but the last is superseded by the next.
    made    int[];
    m       int;
    answer  jsonb;
BEGIN
    -- Per app at most one queued and one running row: each lookup is an equality on the
    -- whole key of a unique partial index (migration 0017 says why that matters).
    SELECT id, claimed_digest, resolved_digest INTO q_id, q_claim, q_res
    FROM deployments WHERE app = p_app AND state = 'queued';
    SELECT id, claimed_digest, resolved_digest INTO r_id, r_claim, r_res
    FROM deployments WHERE app = p_app AND state = 'running';
    -- At most twice: the second pass only when a worker claimed the queued deployment
    -- between the lookup and its supersede; it then runs, and the requests are judged
    -- against it running, with nothing queued (only holders of the app's lock queue).
    LOOP
        ids := array_fill(NULL::uuid, ARRAY[n]);
        named := array_fill(NULL::uuid, ARRAY[n]);
        made := '{}';
        before := q_id;
        FOR t IN 1 .. n LOOP
            -- The queued one is the newer: it is the one named.
            IF p_digest[t] IS NOT NULL AND q_id IS NOT NULL
               AND (q_claim = p_digest[t] OR q_res = p_digest[t]) THEN
                named[t] := q_id;
            ELSIF p_digest[t] IS NOT NULL AND r_id IS NOT NULL
                  AND (r_claim = p_digest[t] OR r_res = p_digest[t]) THEN
                named[t] := r_id;
            ELSE
                ids[t] := gen_random_uuid();
                named[t] := q_id;
                made := made || t;
                q_id := ids[t];
                q_claim := p_digest[t];
                q_res := NULL;
            END IF;
        END LOOP;
        EXIT WHEN before IS NULL OR cardinality(made) = 0;
        -- By key, before the INSERT (one queued per app). A worker may have claimed it
        -- meanwhile: then it runs, and it is not superseded.
        UPDATE deployments
        SET state = 'superseded', superseded_by = ids[made[1]], finished_at = now(),
            updated_at = now(),
            outcome = 'superseded by a newer deployment before it started'
        WHERE id = before AND state = 'queued'
        RETURNING id INTO gone;
        EXIT WHEN gone IS NOT NULL;
        SELECT id, claimed_digest, resolved_digest INTO r_id, r_claim, r_res
        FROM deployments WHERE app = p_app AND state = 'running';
        q_id := NULL;
        q_claim := NULL;
        q_res := NULL;
    END LOOP;

    -- Every push's deployment, written once in its final state: the newest queued, each
    -- older one superseded by the next, as the call-by-call version left them.
    m := cardinality(made);
    IF m > 0 THEN
        INSERT INTO deployments
            (id, app, trigger, delivery_id, image, requested_tag, claimed_digest, pinned,
             requested_by, state, superseded_by, finished_at, outcome)
        SELECT ids[t], p_app, p_trigger[t], p_delivery[t], p_image[t], p_tag[t],
               p_digest[t], p_pinned[t], p_requested_by[t],
               CASE WHEN k < m THEN 'superseded' ELSE 'queued' END,
               CASE WHEN k < m THEN ids[made[k + 1]] END,
               CASE WHEN k < m THEN now() END,
               CASE WHEN k < m THEN 'superseded by a newer deployment before it started' END
        FROM unnest(made) WITH ORDINALITY AS s(t, k);
    END IF;

    SELECT jsonb_agg(CASE
               WHEN ids[t] IS NULL THEN jsonb_build_object(
                   'result', 'already_pending', 'id', named[t], 'app', p_app)
               ELSE jsonb_build_object(
                   'result', 'queued', 'id', ids[t], 'app', p_app, 'superseded',
                   CASE WHEN named[t] IS NULL THEN '[]'::jsonb
                        ELSE jsonb_build_array(named[t]) END)
               END ORDER BY t)
    INTO answer
    FROM generate_subscripts(ids, 1) AS t;
    RETURN coalesce(answer, '[]');
END;
$$ LANGUAGE plpgsql;

-- Queues one deployment of an app whose enqueue lock the caller holds: the case of one
-- request of `pier_enqueue_many`. Answers what `Enqueued` (store/deployments.rs) reads.
CREATE OR REPLACE FUNCTION pier_enqueue(
    p_app          text,
    p_trigger      text,
    p_delivery     uuid,
    p_image        text,
    p_tag          text,
    p_digest       text,
    p_pinned       boolean,
    p_requested_by text
) RETURNS jsonb AS $$
BEGIN
    RETURN pier_enqueue_many(p_app, ARRAY[p_trigger], ARRAY[p_delivery], ARRAY[p_image],
                             ARRAY[p_tag], ARRAY[p_digest], ARRAY[p_pinned],
                             ARRAY[p_requested_by]) -> 0;
END;
$$ LANGUAGE plpgsql;

-- Records a batch of deliveries in arrival order, as if they came one by one: each new
-- delivery is stored once (a repeat of an event key, or of a body where the source stores
-- its hash, is counted on the first row instead), and each deployment it asks for is, in
-- order: not queued if an operator pinned the app; not queued if `w_newer` names a higher
-- version in play; otherwise queued by `pier_enqueue_many`, one call per app for all of
-- the batch's pushes to it. Deliveries are `d_*` (1-based); their deployments are `w_*`,
-- ascending by `w_delivery`. Answers one JSON outcome per delivery, in order, as `Answer`
-- (store/deliveries.rs) reads it.
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
    w_pinned        boolean[],
    w_newer         text[]
) RETURNS jsonb AS $$
DECLARE
    nd       int := coalesce(array_length(d_source, 1), 0);
    nw       int := coalesce(array_length(w_app, 1), 0);
    answer   jsonb := '[]';
    ids      uuid[] := '{}';
    stored   uuid[];
    verdicts text[] := '{}';
    reasons  text[] := '{}';
    -- Per requested deployment: the pin that keeps it back, the version that holds it
    -- back, or what `pier_enqueue_many` answered for it.
    w_pin    jsonb[];
    w_held   jsonb[];
    w_res    jsonb[];
    w_go     boolean[];
    -- Per app of the batch, looked up once: its pin in force (as JSON and as a reason).
    pin_apps text[] := '{}';
    pin_json jsonb[] := '{}';
    pin_why  text[] := '{}';
    pin      record;
    slot     int;
    j        int;
    -- One delivery's parts, as the call-by-call version built them.
    deployed text[];
    held_why text[];
    pinned_why text[];
    why      text[];
    -- The apps that queue something, in order of first request, and one app's requests.
    go_apps  text[] := '{}';
    js       int[];
    a_trigger  text[];
    a_delivery uuid[];
    a_image    text[];
    a_tag      text[];
    a_digest   text[];
    a_pinned   boolean[];
    did      uuid;
    was_dup  boolean;
    deps     jsonb;
    pinned   jsonb;
    held     jsonb;
    enq      jsonb;
BEGIN
    -- The aggregate consumes the sorted subquery's rows in order: locks go key by key, so
    -- two batches never wait on each other's locks in a circle.
    IF nw > 0 THEN
        PERFORM count(pg_advisory_xact_lock(k)) FROM (
            SELECT DISTINCT hashtext('pier:app:' || a) AS k FROM unnest(w_app) AS a
            ORDER BY k) AS keys;
    END IF;
    w_pin := array_fill(NULL::jsonb, ARRAY[nw]);
    w_held := array_fill(NULL::jsonb, ARRAY[nw]);
    w_res := array_fill(NULL::jsonb, ARRAY[nw]);
    w_go := array_fill(false, ARRAY[nw]);

    -- What each delivery asks for, and so its verdict and reason, before anything is
    -- written: pins and versions in play are read under the apps' locks and do not depend
    -- on what the batch queues.
    j := 1;
    FOR i IN 1 .. nd LOOP
        ids[i] := gen_random_uuid();
        verdicts[i] := CASE WHEN j <= nw AND w_delivery[j] = i THEN 'queued' ELSE 'ignored' END;
        reasons[i] := d_reason[i];
        deployed := '{}';
        held_why := '{}';
        pinned_why := '{}';
        WHILE j <= nw AND w_delivery[j] = i LOOP
            slot := array_position(pin_apps, w_app[j]);
            IF slot IS NULL THEN
                -- Under the app's enqueue lock, as the rollback that pins: a push racing a
                -- rollback either sees the pin or is superseded by it.
                SELECT p.app, p.digest, p.pinned_by, p.pinned_at, p.deployment_id INTO pin
                FROM pins p WHERE p.app = w_app[j] AND p.unpinned_at IS NULL
                LIMIT 1;
                pin_apps := pin_apps || w_app[j];
                slot := cardinality(pin_apps);
                IF FOUND THEN
                    pin_json := array_append(pin_json, jsonb_build_object(
                        'app', pin.app, 'digest', pin.digest, 'by', pin.pinned_by,
                        'at', pin.pinned_at, 'deployment_id', pin.deployment_id));
                    -- Same words as `pinned_reason` in Rust (the hook's answer).
                    pin_why := array_append(pin_why, format(
                        '%s: pinned to %s by %s at %s; not deployed until unpinned',
                        pin.app, pin.digest, pin.pinned_by,
                        to_char(pin.pinned_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                            || ' UTC'));
                ELSE
                    pin_json := array_append(pin_json, NULL::jsonb);
                    pin_why := array_append(pin_why, NULL::text);
                END IF;
            END IF;
            IF pin_json[slot] IS NOT NULL THEN
                w_pin[j] := pin_json[slot];
                pinned_why := pinned_why || pin_why[slot];
            ELSIF w_newer[j] IS NOT NULL THEN
                w_held[j] := jsonb_build_object(
                    'app', w_app[j], 'tag', w_tag[j], 'newer', w_newer[j]);
                -- Same words as `HeldBack::reason` in Rust.
                held_why := held_why || format(
                    '%s: %s not deployed, %s is newer (running or queued); '
                        || 'a version range never rolls back',
                    w_app[j], w_tag[j], w_newer[j]);
            ELSE
                w_go[j] := true;
                deployed := deployed || w_app[j];
            END IF;
            j := j + 1;
        END LOOP;
        IF cardinality(held_why) > 0 OR cardinality(pinned_why) > 0 THEN
            why := held_why || pinned_why;
            IF cardinality(deployed) > 0 THEN
                why := ('deploys ' || array_to_string(deployed, ', ')) || why;
            END IF;
            verdicts[i] := CASE WHEN cardinality(deployed) > 0 THEN 'queued'
                                WHEN cardinality(pinned_why) > 0 THEN 'pinned'
                                ELSE 'ignored' END;
            reasons[i] := array_to_string(why, '; ');
        END IF;
    END LOOP;

    -- The new deliveries in ONE statement, in arrival order, so that of two with one key
    -- the first is stored.
    WITH new AS (
        INSERT INTO deliveries
            (id, source, event_key, verdict, reason, events, body_sha256, redelivery_of)
        SELECT x_id, x_source, x_key, x_verdict, x_reason, x_events::jsonb, x_body, x_of
        FROM unnest(ids, d_source, d_event_key, verdicts, reasons, d_events, d_body,
                    d_redelivery_of) WITH ORDINALITY
             AS x(x_id, x_source, x_key, x_verdict, x_reason, x_events, x_body, x_of, x_n)
        ORDER BY x_n
        ON CONFLICT DO NOTHING
        RETURNING id)
    SELECT coalesce(array_agg(id), '{}') INTO stored FROM new;

    -- A repeat's deployments are not asked for.
    FOR j IN 1 .. nw LOOP
        IF w_go[j] THEN
            w_go[j] := ids[w_delivery[j]] = ANY (stored);
            IF w_go[j] AND array_position(go_apps, w_app[j]) IS NULL THEN
                go_apps := go_apps || w_app[j];
            END IF;
        END IF;
    END LOOP;

    -- Each app's pushes in one call, in arrival order: apps do not share queue rows, so
    -- this is what queueing them delivery by delivery gave.
    FOR a IN 1 .. cardinality(go_apps) LOOP
        js := '{}';
        a_trigger := '{}';
        a_delivery := '{}';
        a_image := '{}';
        a_tag := '{}';
        a_digest := '{}';
        a_pinned := '{}';
        FOR j IN 1 .. nw LOOP
            IF w_go[j] AND w_app[j] = go_apps[a] THEN
                js := js || j;
                a_trigger := a_trigger || w_trigger[j];
                a_delivery := a_delivery || ids[w_delivery[j]];
                a_image := a_image || w_image[j];
                a_tag := a_tag || w_tag[j];
                a_digest := a_digest || w_digest[j];
                a_pinned := a_pinned || w_pinned[j];
            END IF;
        END LOOP;
        enq := pier_enqueue_many(go_apps[a], a_trigger, a_delivery, a_image, a_tag, a_digest,
                                 a_pinned, array_fill(NULL::text, ARRAY[cardinality(js)]));
        FOR x IN 1 .. cardinality(js) LOOP
            w_res[js[x]] := enq -> (x - 1);
        END LOOP;
    END LOOP;

    j := 1;
    FOR i IN 1 .. nd LOOP
        IF NOT ids[i] = ANY (stored) THEN
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
            WHILE j <= nw AND w_delivery[j] = i LOOP
                j := j + 1;
            END LOOP;
            CONTINUE;
        END IF;
        deps := '[]';
        pinned := '[]';
        held := '[]';
        WHILE j <= nw AND w_delivery[j] = i LOOP
            IF w_pin[j] IS NOT NULL THEN
                pinned := pinned || jsonb_build_array(w_pin[j]);
            ELSIF w_held[j] IS NOT NULL THEN
                held := held || jsonb_build_array(w_held[j]);
            ELSE
                deps := deps || jsonb_build_array(w_res[j]);
            END IF;
            j := j + 1;
        END LOOP;
        answer := answer || jsonb_build_array(jsonb_build_object(
            'outcome', 'recorded', 'delivery_id', ids[i], 'deployments', deps,
            'pinned', pinned, 'held_back', held));
    END LOOP;
    RETURN answer;
END;
$$ LANGUAGE plpgsql;
