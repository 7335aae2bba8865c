-- What each run of a job reported over time, thinned as the run grows
-- (see `Sample::due`): the dashboard's throughput, exposure, throttle,
-- replica-lag and dead-letter charts, and its list of runs and restores.
CREATE TABLE IF NOT EXISTS tidewater_samples (
    job_id BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    rows_done BIGINT NOT NULL,
    rows_per_second DOUBLE PRECISION,
    exposure_rows BIGINT NOT NULL,
    exposure_ms BIGINT NOT NULL,
    throttle TEXT,
    replica_lag_ms BIGINT,
    rows_dead_lettered BIGINT NOT NULL,
    restored_from BIGINT,
    fallbacks BIGINT NOT NULL,
    PRIMARY KEY (job_id, epoch, at_ms)
);
CREATE INDEX IF NOT EXISTS tidewater_samples_by_time ON tidewater_samples (job_id, at_ms);
