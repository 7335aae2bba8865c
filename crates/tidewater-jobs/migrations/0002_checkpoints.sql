-- Each job's completed checkpoints, as its workers report them: what the
-- checkpoint timeline of `GET /api/v1/jobs/{id}/checkpoints` shows.
CREATE TABLE IF NOT EXISTS tidewater_checkpoints (
    job_id BIGINT NOT NULL,
    checkpoint BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    kind TEXT NOT NULL,
    triggered_ms BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    bytes BIGINT NOT NULL,
    align_ms BIGINT NOT NULL,
    snapshot_ms BIGINT NOT NULL,
    upload_ms BIGINT NOT NULL,
    manifest_ms BIGINT NOT NULL,
    commit_ms BIGINT NOT NULL,
    PRIMARY KEY (job_id, checkpoint)
);
