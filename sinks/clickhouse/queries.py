"""Named questions over the history (`commwatch query NAME`, `commwatch incidents`).

Each query uses ClickHouse server-side parameters (`{job:String}`, `{days:UInt32}`) and
unqualified table names (the client's default database is the commwatch database).
docs/queries.md shows every one of them; a test runs them against a populated database.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NamedQuery:
    description: str
    sql: str
    params: tuple[str, ...] = ()


NAMED: dict[str, NamedQuery] = {
    "incidents": NamedQuery(
        "latest state of every incident of a job",
        """SELECT incident, kind, severity, status, opened_at, resolved_at, culprit_ranks, culprit_nodes, summary
FROM incidents FINAL
WHERE job = {job:String}
ORDER BY opened_at, incident""",
        ("job",),
    ),
    "open": NamedQuery(
        "incidents not yet resolved, all jobs, most severe first",
        """SELECT job, incident, kind, severity, opened_at, updated_at, culprit_ranks, culprit_nodes
FROM incidents FINAL
WHERE status != 'resolved'
ORDER BY severity, opened_at""",
    ),
    "culprit-nodes": NamedQuery(
        "nodes most often named as culprits over the last N days",
        """SELECT node, count() AS incidents, uniqExact(job) AS jobs, groupUniqArray(kind) AS kinds
FROM incidents FINAL
ARRAY JOIN culprit_nodes AS node
WHERE opened_at >= now64(3) - INTERVAL {days:UInt32} DAY
GROUP BY node
ORDER BY incidents DESC, node
LIMIT 20""",
        ("days",),
    ),
    "culprit-ranks": NamedQuery(
        "ranks most often named as culprits over the last N days",
        """SELECT job, rank, count() AS incidents, groupUniqArray(kind) AS kinds
FROM incidents FINAL
ARRAY JOIN culprit_ranks AS rank
WHERE opened_at >= now64(3) - INTERVAL {days:UInt32} DAY
GROUP BY job, rank
ORDER BY incidents DESC, job, rank
LIMIT 20""",
        ("days",),
    ),
    "mttd": NamedQuery(
        "mean time to detect by kind over N days (from evidence.onset_ns, when the detector gives it)",
        """SELECT kind, count() AS incidents,
       countIf(onset > 0) AS with_onset,
       round(avgIf((opened_ns - onset) / 1e9, onset > 0), 3) AS mean_ttd_s,
       round(quantileIf(0.9)((opened_ns - onset) / 1e9, onset > 0), 3) AS p90_ttd_s
FROM (
    SELECT kind, opened_ns, JSONExtractInt(evidence, 'onset_ns') AS onset
    FROM incidents FINAL
    WHERE opened_at >= now64(3) - INTERVAL {days:UInt32} DAY
)
GROUP BY kind
ORDER BY kind""",
        ("days",),
    ),
    "incidents-per-day": NamedQuery(
        "incidents opened per day and kind over N days",
        """SELECT toDate(opened_at) AS day, kind, count() AS incidents, countIf(severity = 'P0') AS p0
FROM incidents FINAL
WHERE opened_at >= now64(3) - INTERVAL {days:UInt32} DAY
GROUP BY day, kind
ORDER BY day, kind""",
        ("days",),
    ),
    "slowest-ranks": NamedQuery(
        "ranks of a job that enter collectives latest: a collective completes together on all "
        "members, so a rank's entry lag is the longest member's duration minus its own (no clock "
        "offsets involved)",
        """SELECT rank, count() AS calls,
       round(avg(lag_ns) / 1e6, 3) AS mean_lag_ms,
       round(quantile(0.99)(lag_ns) / 1e6, 3) AS p99_lag_ms,
       round(avg(lag_ns = max_lag_ns), 3) AS last_share
FROM (
    SELECT rank, dur_ns, max(dur_ns) OVER w - dur_ns AS lag_ns, max(dur_ns) OVER w - min(dur_ns) OVER w AS max_lag_ns
    FROM (
        SELECT comm, seq, rank, toUnixTimestamp64Nano(end) - toUnixTimestamp64Nano(start) AS dur_ns
        FROM calls FINAL
        WHERE job = {job:String} AND op NOT IN ('Send', 'Recv')
    )
    WINDOW w AS (PARTITION BY comm, seq)
)
GROUP BY rank
ORDER BY mean_lag_ms DESC, rank
LIMIT 20""",
        ("job",),
    ),
    "clock-offsets": NamedQuery(
        "estimated clock offset of each rank of a job (median distance of its completion times "
        "from each collective's median completion)",
        """SELECT rank, count() AS instances, round(median(d) / 1e6, 3) AS offset_ms
FROM (
    SELECT rank, toUnixTimestamp64Nano(end) - median(toUnixTimestamp64Nano(end)) OVER (PARTITION BY comm, seq) AS d
    FROM calls FINAL
    WHERE job = {job:String} AND op NOT IN ('Send', 'Recv')
)
GROUP BY rank
ORDER BY rank""",
        ("job",),
    ),
    "ops": NamedQuery(
        "calls of a job by operation: count, bytes, duration",
        """SELECT op, count() AS calls, formatReadableSize(sum(bytes)) AS bytes,
       round(avg(toUnixTimestamp64Nano(end) - toUnixTimestamp64Nano(start)) / 1e6, 3) AS mean_ms,
       round(quantile(0.99)(toUnixTimestamp64Nano(end) - toUnixTimestamp64Nano(start)) / 1e6, 3) AS p99_ms
FROM calls FINAL
WHERE job = {job:String}
GROUP BY op
ORDER BY calls DESC""",
        ("job",),
    ),
    "steps": NamedQuery(
        "iteration time per rank of a job",
        """SELECT rank, count() AS iterations, round(avg(duration_ms), 1) AS mean_ms,
       round(quantile(0.5)(duration_ms), 1) AS p50_ms, round(quantile(0.99)(duration_ms), 1) AS p99_ms
FROM steps FINAL
WHERE job = {job:String}
GROUP BY rank
ORDER BY mean_ms DESC, rank
LIMIT 20""",
        ("job",),
    ),
    "hw-faults": NamedQuery(
        "hardware samples of a job with throttling, ECC errors, XIDs or NVLink errors",
        """SELECT node, rank, gpu, count() AS samples, min(ts) AS first_seen, max(ts) AS last_seen,
       groupBitOr(throttle_reasons) AS throttle_bits, max(ecc_dbe) AS max_ecc_dbe,
       groupUniqArray(xid) AS xids, max(nvlink_errors) AS max_nvlink_errors, round(min(sm_clock_mhz)) AS min_sm_mhz
FROM hw FINAL
WHERE job = {job:String} AND (throttle_reasons != 0 OR ecc_dbe != 0 OR xid != 0 OR nvlink_errors != 0)
GROUP BY node, rank, gpu
ORDER BY samples DESC""",
        ("job",),
    ),
    "culprit-placement": NamedQuery(
        "culprit ranks of a job's incidents with their node and parallel coordinates",
        """SELECT i.incident, i.kind, r AS rank, t.node, t.local_rank, t.coords
FROM (SELECT job, incident, kind, culprit_ranks FROM incidents FINAL WHERE job = {job:String}) AS i
ARRAY JOIN i.culprit_ranks AS r
LEFT JOIN (SELECT job, rank, node, local_rank, coords FROM topology FINAL WHERE job = {job:String}) AS t
    ON t.job = i.job AND t.rank = r
ORDER BY i.incident, rank""",
        ("job",),
    ),
    "window-lag": NamedQuery(
        "latest per-rank window statistics of a job, laggiest first",
        """SELECT comm, rank, max(window_end) AS latest_window_end,
       argMax(mean_lag_ms, window_end) AS mean_lag_ms, argMax(last_share, window_end) AS last_share,
       argMax(clock_offset_ms, window_end) AS clock_offset_ms
FROM windows FINAL
WHERE job = {job:String}
GROUP BY comm, rank
ORDER BY mean_lag_ms DESC
LIMIT 20""",
        ("job",),
    ),
}

DEFAULTS = {"days": 30}
