-- Tag rules, the reconcile poller and the deliveries page.

-- A retry or a replay of a stored delivery is counted on the original row, never stored as
-- a row of its own: a sender retrying forever, or an attacker replaying a captured body,
-- cannot grow the table. The two counters tell the page which kind the repeats were.
ALTER TABLE deliveries ADD COLUMN duplicates integer NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN replays    integer NOT NULL DEFAULT 0;
-- An admin's redelivery (intake run again on a stored delivery's events) is a new row that
-- points at the delivery it repeats.
ALTER TABLE deliveries ADD COLUMN redelivery_of uuid REFERENCES deliveries (id);

-- GET /deliveries filters by source and by verdict, newest first, a page at a time
-- (keyset on received_at, id): every filter reads an index, never the whole table.
CREATE INDEX deliveries_by_source  ON deliveries (source,  received_at DESC, id DESC);
CREATE INDEX deliveries_by_verdict ON deliveries (verdict, received_at DESC, id DESC);
CREATE INDEX deliveries_with_duplicates ON deliveries (received_at DESC, id DESC) WHERE duplicates > 0;
CREATE INDEX deliveries_with_replays    ON deliveries (received_at DESC, id DESC) WHERE replays > 0;
-- The deployments a page of deliveries created.
CREATE INDEX deployments_by_delivery ON deployments (delivery_id) WHERE delivery_id IS NOT NULL;
-- The unfiltered page, in the same (received_at, id) order as the filtered ones.
CREATE INDEX deliveries_page ON deliveries (received_at DESC, id DESC);
