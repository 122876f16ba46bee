"""Rules host_sync and sync_copy: the host blocking on the GPU, and copies that make it.

host_sync reads the `sync` gaps of idle.parquet (nsysmap.waits: the GPU idle
while the launching thread was blocked in cudaStreamSynchronize,
cudaDeviceSynchronize, a synchronous cudaMemcpy or `.item()`), in the
measured steps, and names what ran just before each gap on its stream (the
work whose result the host waited for: a device-to-host copy under
`aten::_local_scalar_dense` is `.item()`). sync_copy reads the host-to-device
copies in the steps that are synchronous (`cudaMemcpy`, not `...Async`) or,
where the profile says so (torch.profiler: `Memcpy HtoD (Pageable -> Device)`),
from pageable memory. An nsys export's copies say neither whether their
memory was pageable (the reader does not read it): asynchronous copies there
make no finding.
"""

from __future__ import annotations

import polars as pl

from nsysmap.findings.comm_gaps import idle_claims
from nsysmap.findings.finding import MEDIUM, Finding, Rule, claims_of
from nsysmap.findings.inputs import BUSY_KEYS, Inputs, total_ns
from nsysmap.findings.phrases import count, cut, listed, ms, path_text, pct, plural, share
from nsysmap.waits.tables import is_sync_copy

HTOD = r"(?i)HtoD|Host-to-Device|Host -> Device"
DTOH = r"(?i)DtoH|Device-to-Host|Device -> Host"
PAGEABLE = r"(?i)pageable"
PATH_TAIL = 2  # range names shown of the path before a gap
LABEL = 100  # characters of each, at most
COPY, COPIES = "host-to-device copy", "host-to-device copies"


def host_sync(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device whose GPU sat idle while the host synchronised in the step."""
    pools = x.idle_pools
    out: list[Finding] = []
    if pools.is_empty():
        return out
    for device in pools["device_id"].unique().sort().to_list():
        rows = pools.filter(pl.col("device_id") == device)
        idle = total_ns(rows, "idle_sync_ns")
        if not idle or rule.below_min_share(x, device, idle):
            continue
        out.append(
            Finding(
                rule=rule,
                device_id=device,
                place=x.where(device),
                evidence=_sync_evidence(x, device, idle),
                evidence_rows=f"idle.parquet: kind sync, device_id {device}, its busiest stream; "
                "ops.parquet: the operation before each gap",
                basis_ns=idle,
                claims=idle_claims(x, rows, "idle_sync", "idle_sync_ns", "idle_sync_ns"),
                estimate="the GPU's idle time after the synchronisations: without them the host "
                "launches ahead and the GPU need not wait",
                confidence=MEDIUM,
                rank=x.rank,
            )
        )
    return out


def _sync_evidence(x: Inputs, device: int, idle: int) -> str:
    steps, step_ns = x.step_count(device), x.step_ns(device)
    gaps = x.gaps.filter(
        (pl.col("device_id") == device) & (pl.col("kind").cast(pl.String) == "sync")
    )
    before = _before(x, gaps)
    to_host = pl.col("name").str.contains(DTOH)
    copies = _copies(x).filter((pl.col("device_id") == device) & to_host).height
    text = (
        f"the GPU sat idle {ms(idle / steps)}{x.per} ({pct(share(idle / steps, step_ns))} of "
        f"{x.the_step}) in {plural(gaps.height / steps, 'gap')} while the host was blocked in a "
        "synchronisation; "
        f"{plural(copies / steps, 'device-to-host copy', 'device-to-host copies')}{x.per}"
    )
    return text + (f"; the gaps follow {listed(before)}" if before else "")


def _before(x: Inputs, gaps: pl.DataFrame) -> list[str]:
    """What ran last on the stream before each gap, by idle time: a range path's last
    names and the operation, most first."""
    if gaps.is_empty():
        return []
    before = pl.coalesce("short_name", "name").alias("before_op")
    ops = (
        x.ops.select("device_id", "stream_id", "end_ns", before, before_path="range_path")
        .filter(pl.col("device_id").is_in(gaps["device_id"].unique().implode()))
        .sort("end_ns")
        .collect()
    )
    found = gaps.sort("start_ns").join_asof(
        ops,
        left_on="start_ns",
        right_on="end_ns",
        by=["device_id", "stream_id"],
        check_sortedness=False,  # both sorted by time above
    )
    paths = {p: path_text(p, PATH_TAIL) for p in found["before_path"].drop_nulls().unique()}
    tail = pl.col("before_path").replace_strict(paths, default=None, return_dtype=pl.String)
    label = pl.format("{} ({})", pl.coalesce(tail, pl.lit("no range")), "before_op")
    rows = found.group_by(label.alias("label")).agg(pl.col("dur_ns").sum())
    labels = rows.sort(["dur_ns", "label"], descending=[True, False])["label"].drop_nulls()
    return [cut(label, LABEL) for label in labels.to_list()]


def _copies(x: Inputs) -> pl.DataFrame:
    """The measured copies (a few among the kernels: names are matched on these only)."""
    copies = x.measured().filter(pl.col("kind") == "memcpy")
    return copies.select(*BUSY_KEYS, "name", "launch_api", "dur_ns").collect()


def sync_copy(x: Inputs, rule: Rule) -> list[Finding]:
    """One finding per device whose steps copy to the GPU synchronously or from pageable memory."""
    name = pl.col("name").fill_null("")
    sync = is_sync_copy(pl.col("launch_api"))
    copies = (
        _copies(x).lazy().filter(name.str.contains(HTOD) & (sync | name.str.contains(PAGEABLE)))
    )
    grouped = copies.group_by(BUSY_KEYS).agg(
        copies=pl.len(),
        copy_ns=pl.col("dur_ns").sum(),
        synchronous=sync.sum(),
        pageable=name.str.contains(PAGEABLE).sum(),
    )
    found = x.with_busy(grouped.collect())
    made = (
        _copy_finding(x, rule, device, found.filter(pl.col("device_id") == device))
        for device in found["device_id"].unique().sort().to_list()
    )
    return [f for f in made if f is not None]


def _copy_finding(x: Inputs, rule: Rule, device: int, rows: pl.DataFrame) -> Finding | None:
    steps, step_ns = x.step_count(device), x.step_ns(device)
    time = total_ns(rows, "copy_ns")
    if rule.below_min_share(x, device, time):
        return None
    evidence = (
        f"{plural(total_ns(rows, 'copies') / steps, COPY, COPIES)}{x.per} take "
        f"{ms(time / steps)} of the GPU's time ({pct(share(time / steps, step_ns))} of "
        f"{x.the_step}): {count(total_ns(rows, 'synchronous') / steps)} synchronous (cudaMemcpy), "
        f"{count(total_ns(rows, 'pageable') / steps)} from pageable memory"
    )
    return Finding(
        rule=rule,
        device_id=device,
        place=x.where(device),
        evidence=evidence,
        evidence_rows=f"ops.parquet: kind memcpy, host to device, device_id {device} "
        "(launch_api, name)",
        basis_ns=time,
        claims=claims_of(rows, "busy", BUSY_KEYS, "copy_ns", "busy_ns", x.rank),
        estimate="the copies' time: pinned, asynchronous copies run beside the compute "
        "(and faster), so at most this much goes",
        confidence=MEDIUM,
        rank=x.rank,
    )
