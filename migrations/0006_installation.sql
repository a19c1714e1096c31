-- One row per Pier installation (one database). `env_key` keys the hash of an app's env
-- values that the `create` step journals: a change of a secret shows as a change, but
-- nobody who can read the page can confirm a guessed secret against it.
CREATE TABLE installation (
    only_row    boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    env_key     bytea       NOT NULL CHECK (length(env_key) = 32),
    created_at  timestamptz NOT NULL DEFAULT now()
);
