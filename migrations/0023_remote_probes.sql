-- Issue 23, items 4 and 5: a remote engine's containers publish on that host's loopback,
-- which only the `pier proxy --target NAME` running there can reach. The pipeline and
-- that proxy talk through these two tables, each written by one side and NOTIFYing the
-- other; nothing polls.

-- A health probe the pipeline asks a target's proxy to run, and its outcome. The health
-- step's intent is journaled before the request exists; a replay finds the request (and
-- its outcome, if any) by (deployment, target, service, container), or asks again.
CREATE TABLE remote_probes (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    deployment_id uuid        NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    target        text        NOT NULL,
    service       text        NOT NULL DEFAULT '',
    container_id  text        NOT NULL,
    -- What to GET on that host: the address the engine published, and the app's path.
    address       text        NOT NULL,
    path          text        NOT NULL,
    -- The JSON fields the app's `health` requires (an object of dotted path to value).
    json          jsonb       NOT NULL DEFAULT '{}',
    timeout_ms    bigint      NOT NULL CHECK (timeout_ms > 0),
    requested_at  timestamptz NOT NULL DEFAULT now(),
    -- A proxy takes the request before this or never: after it the pipeline lapses it.
    take_by       timestamptz NOT NULL,
    state         text        NOT NULL DEFAULT 'requested'
                  CHECK (state IN ('requested', 'probing', 'healthy', 'failed', 'lapsed')),
    taken_by      text,
    taken_at      timestamptz,
    attempts      integer,
    elapsed_ms    bigint,
    -- Why healthy (the answer) or why not (the last answer, or the reason it stopped).
    detail        text,
    finished_at   timestamptz
);

CREATE INDEX remote_probes_of_container
    ON remote_probes (deployment_id, target, service, container_id, requested_at DESC);
-- What a proxy looks for when it (re)connects or is woken.
CREATE INDEX remote_probes_waiting ON remote_probes (target) WHERE state = 'requested';

-- A new request wakes the proxies (payload: the target); every change of state wakes the
-- pipeline that waits on it (payload: the request's id).
CREATE FUNCTION pier_notify_remote_probes() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('pier_probes', NEW.target);
    ELSIF NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_notify('pier_probe_results', NEW.id::text);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER remote_probes_notify
    AFTER INSERT OR UPDATE ON remote_probes
    FOR EACH ROW EXECUTE FUNCTION pier_notify_remote_probes();

-- What each running `pier proxy` serves, as it last reported: per app the route version it
-- applied, per upstream the requests in flight. Written on change, at most every few tens
-- of milliseconds, and only while something changes: an idle proxy writes nothing.
-- `holder` is the session advisory lock the proxy holds on the connection it writes with:
-- a row whose holder is not alive (`pier_holder_alive`) is a proxy that is gone, and is
-- not waited for.
CREATE TABLE proxy_reports (
    holder      bigint      PRIMARY KEY,
    target      text        NOT NULL,
    proxy       text        NOT NULL,
    routes      jsonb       NOT NULL DEFAULT '{}',
    in_flight   jsonb       NOT NULL DEFAULT '{}',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX proxy_reports_of_target ON proxy_reports (target);

CREATE FUNCTION pier_notify_proxy_reports() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('pier_proxy_reports', NEW.target);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER proxy_reports_notify
    AFTER INSERT OR UPDATE ON proxy_reports
    FOR EACH ROW EXECUTE FUNCTION pier_notify_proxy_reports();
