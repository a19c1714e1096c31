-- A pin or unpin changes what the overview shows without touching any deployment (an
-- unpin queues nothing): announce it on `pier_live` with the nil id, which every live page
-- reads as "anything may have changed", so open pages show the pin as it is, not as it was.
CREATE FUNCTION pier_notify_live_pins() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('pier_live', '00000000-0000-0000-0000-000000000000');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER pins_live AFTER INSERT OR UPDATE ON pins
    FOR EACH STATEMENT EXECUTE FUNCTION pier_notify_live_pins();
