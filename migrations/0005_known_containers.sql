-- Which containers Pier created is read from the journal by id (the `create` step's
-- result) before anything is stopped or removed: indexed, so that the check stays cheap
-- with a long history.
CREATE INDEX deployment_steps_created_container
    ON deployment_steps ((result->>'id')) WHERE step = 'create';
